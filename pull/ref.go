package pull

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// DefaultEndpoint is the Hugging Face hub that hf:// references resolve against when
// neither Options.Endpoint nor $HF_ENDPOINT says otherwise.
const DefaultEndpoint = "https://huggingface.co"

// ErrBadRef is wrapped by the errors of references that cannot be resolved.
var ErrBadRef = errors.New("pull: bad model reference")

//go:embed catalogue.yaml
var builtinCatalogue []byte

// Entry is one model of a catalogue.
type Entry struct {
	Pull   string `yaml:"pull"`   // an hf:// or https:// reference
	SHA256 string `yaml:"sha256"` // the file's digest, when pinned; "": the hub's
}

// Catalogue maps short model names to references.
type Catalogue map[string]Entry

// Builtin returns the built-in catalogue (catalogue.yaml).
func Builtin() Catalogue {
	c, err := ParseCatalogue(builtinCatalogue)
	if err != nil {
		panic(err) // the embedded file is tested
	}
	return c
}

// ParseCatalogue decodes a catalogue file ({models: {NAME: {pull, sha256}}}) strictly.
func ParseCatalogue(data []byte) (Catalogue, error) {
	var f struct {
		Models Catalogue `yaml:"models"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("pull: catalogue: %w", err)
	}
	for name, e := range f.Models {
		if strings.Contains(name, ":") || strings.Contains(name, "/") {
			return nil, fmt.Errorf("pull: catalogue: name %q may not contain ':' or '/'", name)
		}
		if !strings.HasPrefix(e.Pull, "hf://") && !strings.HasPrefix(e.Pull, "https://") && !strings.HasPrefix(e.Pull, "http://") {
			return nil, fmt.Errorf("pull: catalogue: %s: pull %q is not an hf:// or http(s):// reference", name, e.Pull)
		}
		if e.SHA256 != "" && !isDigest(e.SHA256) {
			return nil, fmt.Errorf("pull: catalogue: %s: sha256 %q is not 64 lowercase hex digits", name, e.SHA256)
		}
	}
	return f.Models, nil
}

// Ref is a resolved model reference.
type Ref struct {
	Raw    string // as written
	URL    string // what is downloaded
	Hub    bool   // an hf:// reference: the token is sent and X-Linked-Etag trusted
	SHA256 string // the digest known in advance (catalogue); "": learnt from the server
}

var digestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

func isDigest(s string) bool { return digestRE.MatchString(s) }

// Resolve turns a reference into the URL to download. Catalogue names resolve
// through cat (nil: the built-in catalogue); hf:// through endpoint ("": $HF_ENDPOINT,
// else DefaultEndpoint).
func Resolve(raw, endpoint string, cat Catalogue) (Ref, error) {
	if cat == nil {
		cat = Builtin()
	}
	ref := Ref{Raw: raw}
	if e, ok := cat[raw]; ok {
		r, err := Resolve(e.Pull, endpoint, Catalogue{})
		if err != nil {
			return Ref{}, fmt.Errorf("%w: catalogue entry %s: %w", ErrBadRef, raw, err)
		}
		r.Raw, r.SHA256 = raw, e.SHA256
		return r, nil
	}
	switch {
	case strings.HasPrefix(raw, "hf://"):
		if endpoint == "" {
			endpoint = os.Getenv("HF_ENDPOINT")
		}
		if endpoint == "" {
			endpoint = DefaultEndpoint
		}
		repo, file, rev, err := splitHF(strings.TrimPrefix(raw, "hf://"))
		if err != nil {
			return Ref{}, err
		}
		ref.URL = strings.TrimRight(endpoint, "/") + "/" + repo + "/resolve/" + url.PathEscape(rev) + "/" + escapePath(file)
		ref.Hub = true
	case strings.HasPrefix(raw, "https://") || strings.HasPrefix(raw, "http://"):
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return Ref{}, fmt.Errorf("%w: %q is not a URL", ErrBadRef, raw)
		}
		if u.User != nil {
			return Ref{}, fmt.Errorf("%w: credentials in a URL are not accepted (they would be logged); use HF_TOKEN for the hub", ErrBadRef)
		}
		ref.URL = raw
	default:
		return Ref{}, fmt.Errorf("%w: %q is neither hf://ORG/REPO/FILE.gguf, an http(s):// URL nor a catalogue name (%s)", ErrBadRef, raw, strings.Join(cat.names(), ", "))
	}
	return ref, nil
}

// splitHF splits ORG/REPO[@REV]/PATH.
func splitHF(s string) (repo, file, rev string, err error) {
	parts := strings.SplitN(s, "/", 3)
	if len(parts) < 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" || strings.HasSuffix(parts[2], "/") {
		return "", "", "", fmt.Errorf("%w: hf://%s: want hf://ORG/REPO/FILE.gguf (or ORG/REPO@REVISION/FILE.gguf)", ErrBadRef, s)
	}
	name, rev, _ := strings.Cut(parts[1], "@")
	if rev == "" {
		rev = "main"
	}
	for _, seg := range append([]string{parts[0], name}, strings.Split(parts[2], "/")...) {
		if seg == "" || seg == "." || seg == ".." {
			return "", "", "", fmt.Errorf("%w: hf://%s: empty or dot path segment", ErrBadRef, s)
		}
	}
	return url.PathEscape(parts[0]) + "/" + url.PathEscape(name), parts[2], rev, nil
}

func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

func (c Catalogue) names() []string {
	out := make([]string, 0, len(c))
	for n := range c {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
