package pull

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Errors that Pull wraps; match them with errors.Is.
var (
	ErrNotCached = errors.New("pull: not in the cache")         // Offline and never pulled
	ErrDigest    = errors.New("pull: sha256 mismatch")          // the bytes are not the file announced
	ErrSize      = errors.New("pull: inconsistent sizes")       // the server contradicted itself about the length
	ErrServer    = errors.New("pull: server error")             // an HTTP status that retrying will not fix
	ErrAuth      = errors.New("pull: access denied")            // 401/403: gated or private
	ErrGaveUp    = errors.New("pull: too many failed attempts") // Retries attempts in a row without progress
	ErrNotGGUF   = errors.New("pull: not a GGUF file")          // a .gguf reference whose bytes are not GGUF
)

// Options configures Pull. Only Dir is required.
type Options struct {
	Dir       string        // the cache directory, e.g. DATA_DIR/pull
	Endpoint  string        // the hub of hf:// references; "": $HF_ENDPOINT, else DefaultEndpoint
	Token     string        // bearer token sent to the hub (HF_TOKEN); never logged
	Catalogue Catalogue     // model names; nil: the built-in catalogue
	SHA256    string        // expected digest (overrides the hub's and the catalogue's); "": theirs
	Offline   bool          // answer from the cache only; never touch the network
	Client    *http.Client  // nil: http.DefaultClient's transport with a 30s header timeout
	Retries   int           // attempts in a row without progress before giving up; 0: 8
	Backoff   time.Duration // the first wait after a failed attempt, doubled up to 8×; 0: 500ms

	// Progress, when set, is called about every ProgressEvery (0: 200ms) while bytes
	// arrive, and once with Final set when they are all in.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// Notice, when set, gets one-line human messages: resuming, retrying, waiting for
	// another process, what the server did wrong.
	Notice func(string)
}

// Result is a pulled file.
type Result struct {
	Path     string // the verified file in the cache (blobs/sha256-HEX.gguf)
	SHA256   string // its digest
	Size     int64
	Cached   bool   // answered from the cache: nothing was downloaded
	Verified string // what the digest was checked against ("hub X-Linked-Etag", "catalogue", "--sha256"); "": nothing (the server gave no digest)
}

// refRecord is refs/KEY.json: what a reference resolved to.
type refRecord struct {
	Ref      string `json:"ref"`
	URL      string `json:"url"`
	SHA256   string `json:"sha256"`
	Size     int64  `json:"size"`
	Verified string `json:"verified,omitempty"`
	Pulled   string `json:"pulled"`
}

// partRecord is partial/KEY.part.json: the origin of a partial download, so that a
// resume never mixes the bytes of two versions of a file.
type partRecord struct {
	URL    string `json:"url"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
	ETag   string `json:"etag,omitempty"`
}

// Lookup answers a reference from the cache without any network access.
func Lookup(raw string, o Options) (Result, error) {
	ref, err := Resolve(raw, o.Endpoint, o.Catalogue)
	if err != nil {
		return Result{}, err
	}
	if r, ok := o.lookup(ref); ok {
		return r, nil
	}
	return Result{}, fmt.Errorf("%w: %s (run `lmlite pull %s` first)", ErrNotCached, raw, raw)
}

// Pull returns the cached file of the reference, downloading and verifying it first
// if it is not in the cache.
func Pull(ctx context.Context, raw string, o Options) (Result, error) {
	if o.Dir == "" {
		return Result{}, errors.New("pull: no cache directory")
	}
	ref, err := Resolve(raw, o.Endpoint, o.Catalogue)
	if err != nil {
		return Result{}, err
	}
	if o.SHA256 != "" {
		if !isDigest(o.SHA256) {
			return Result{}, fmt.Errorf("%w: sha256 %q is not 64 lowercase hex digits", ErrBadRef, o.SHA256)
		}
		ref.SHA256 = o.SHA256
	}
	if r, ok := o.lookup(ref); ok {
		return r, nil
	}
	if o.Offline {
		return Result{}, fmt.Errorf("%w: %s (offline)", ErrNotCached, raw)
	}
	for _, d := range []string{"blobs", "refs", "partial", "locks"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			return Result{}, fmt.Errorf("pull: %w", err)
		}
	}
	key := refKey(ref.URL)
	unlock, err := lockFile(ctx, filepath.Join(o.Dir, "locks", key+".lock"), func() {
		o.notice("waiting for another process that is pulling %s", raw)
	})
	if err != nil {
		return Result{}, fmt.Errorf("pull: lock: %w", err)
	}
	defer unlock()
	if r, ok := o.lookup(ref); ok { // the other process finished it
		return r, nil
	}
	d := &download{o: &o, ref: ref, key: key}
	return d.run(ctx)
}

func (o *Options) notice(format string, args ...any) {
	if o.Notice != nil {
		o.Notice(fmt.Sprintf(format, args...))
	}
}

func refKey(url string) string {
	h := sha256.Sum256([]byte(url))
	return hex.EncodeToString(h[:16])
}

func (o *Options) blobPath(digest string) string {
	return filepath.Join(o.Dir, "blobs", "sha256-"+digest+".gguf")
}

// lookup finds a reference's verified blob.
func (o *Options) lookup(ref Ref) (Result, bool) {
	if o.Dir == "" {
		return Result{}, false
	}
	var rec refRecord
	b, err := os.ReadFile(filepath.Join(o.Dir, "refs", refKey(ref.URL)+".json"))
	if err == nil && json.Unmarshal(b, &rec) == nil && isDigest(rec.SHA256) && (ref.SHA256 == "" || ref.SHA256 == rec.SHA256) {
		if st, err := os.Stat(o.blobPath(rec.SHA256)); err == nil && st.Size() == rec.Size {
			return Result{Path: o.blobPath(rec.SHA256), SHA256: rec.SHA256, Size: rec.Size, Cached: true, Verified: rec.Verified}, true
		}
	}
	if ref.SHA256 != "" { // pinned: any reference may have brought the blob
		if st, err := os.Stat(o.blobPath(ref.SHA256)); err == nil {
			return Result{Path: o.blobPath(ref.SHA256), SHA256: ref.SHA256, Size: st.Size(), Cached: true, Verified: "catalogue"}, true
		}
	}
	return Result{}, false
}

// download is one reference's download, owned by the goroutine that runs it.
type download struct {
	o   *Options
	ref Ref
	key string

	size     int64  // the announced size; -1 unknown
	sizeFrom string // who announced it
	want     string // the expected digest; "" unknown
	wantFrom string
	etag     string

	f       *os.File
	h       hash.Hash
	off     int64 // bytes in f (and in h)
	resumed int64
	m       meter
	lastP   time.Time
}

func (d *download) partPath() string { return filepath.Join(d.o.Dir, "partial", d.key+".part") }

func (d *download) run(ctx context.Context) (Result, error) {
	d.size, d.want = -1, d.ref.SHA256
	if d.want != "" {
		d.wantFrom = "catalogue"
		if d.o.SHA256 != "" {
			d.wantFrom = "--sha256"
		}
	}
	if err := d.headRetrying(ctx); err != nil {
		return Result{}, err
	}
	if err := d.openPartial(); err != nil {
		return Result{}, err
	}
	defer func() {
		if d.f != nil {
			d.f.Close()
		}
	}()
	if err := d.fetchAll(ctx); err != nil {
		var keep *keepPartial
		if !errors.As(err, &keep) {
			d.discard()
		}
		return Result{}, err
	}
	return d.finish()
}

// keepPartial marks an error after which the partial file is worth resuming.
type keepPartial struct{ err error }

func (k *keepPartial) Error() string { return k.err.Error() }
func (k *keepPartial) Unwrap() error { return k.err }

// discard deletes the partial download (its bytes are not trusted).
func (d *download) discard() {
	if d.f != nil {
		d.f.Close()
		d.f = nil
	}
	os.Remove(d.partPath())
	os.Remove(d.partPath() + ".json")
}

// headRetrying is head, tried again after a network error.
func (d *download) headRetrying(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		err := d.head(ctx)
		var keep *keepPartial
		if err == nil || !errors.As(err, &keep) || attempt >= d.retries() || ctx.Err() != nil {
			return err
		}
		d.o.notice("%v; asking again", err)
		select {
		case <-ctx.Done():
		case <-time.After(d.backoff()):
		}
	}
}

func (d *download) retries() int {
	if d.o.Retries == 0 {
		return 8
	}
	return d.o.Retries
}

func (d *download) backoff() time.Duration {
	if d.o.Backoff == 0 {
		return 500 * time.Millisecond
	}
	return d.o.Backoff
}

// head asks the server what the file is: its size and, from the hub, its sha256.
// A redirect to another host is not followed: the hub puts X-Linked-Etag and
// X-Linked-Size on its redirect to the CDN (huggingface_hub's get_hf_file_metadata
// reads them there, following only the hub's relative redirects, as here).
func (d *download) head(ctx context.Context) error {
	req, err := d.request(ctx, http.MethodHead, d.ref.URL)
	if err != nil {
		return err
	}
	c := *d.client()
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		// Follow the hub's own relative redirects (a renamed repository answers 307 to
		// its new name); stop at the CDN, whose answer carries no digest.
		// Stop at the response that carries the linked headers.
		if req.Response != nil && req.Response.Header.Get("X-Linked-Etag") == "" && req.URL.Host == via[0].URL.Host && len(via) < 10 {
			return nil
		}
		return http.ErrUseLastResponse
	}
	resp, err := c.Do(req)
	if err != nil {
		return &keepPartial{fmt.Errorf("pull: %s: %w", d.ref.Raw, scrub(err, d.o.Token))}
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented:
		return nil // no HEAD: learn the size from the GET
	case resp.StatusCode >= 300 && resp.StatusCode < 400 || resp.StatusCode == http.StatusOK:
	default:
		return d.statusErr(resp)
	}
	if d.ref.Hub {
		if v := unquoteETag(resp.Header.Get("X-Linked-Etag")); isDigest(v) {
			if d.want != "" && d.want != v {
				return fmt.Errorf("%w: %s: the hub says the file's sha256 is %s but the %s says %s", ErrDigest, d.ref.Raw, v, d.wantFrom, d.want)
			}
			if d.want == "" {
				d.want, d.wantFrom = v, "hub X-Linked-Etag"
			}
		}
		if n, err := strconv.ParseInt(resp.Header.Get("X-Linked-Size"), 10, 64); err == nil && n >= 0 {
			d.size, d.sizeFrom = n, "X-Linked-Size"
		}
	}
	if d.size < 0 && resp.StatusCode == http.StatusOK && resp.ContentLength >= 0 {
		d.size, d.sizeFrom = resp.ContentLength, "Content-Length of HEAD"
	}
	d.etag = resp.Header.Get("X-Linked-Etag")
	if d.etag == "" {
		d.etag = resp.Header.Get("ETag")
	}
	return nil
}

func unquoteETag(s string) string {
	s = strings.TrimPrefix(strings.TrimSpace(s), "W/")
	return strings.Trim(s, `"`)
}

func (d *download) client() *http.Client {
	if d.o.Client != nil {
		return d.o.Client
	}
	return defaultClient
}

var defaultClient = &http.Client{Transport: &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	ResponseHeaderTimeout: 30 * time.Second,
	TLSHandshakeTimeout:   10 * time.Second,
	IdleConnTimeout:       30 * time.Second,
}}

func (d *download) request(ctx context.Context, method, url string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, fmt.Errorf("pull: %s: %w", d.ref.Raw, err)
	}
	req.Header.Set("User-Agent", "lmlite-pull")
	req.Header.Set("Accept-Encoding", "identity") // ranges count bytes of the file itself
	if d.ref.Hub && d.o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+d.o.Token)
	}
	return req, nil
}

// statusErr is the error of a response that retrying will not fix.
func (d *download) statusErr(resp *http.Response) error {
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		hint := ""
		if d.ref.Hub {
			if d.o.Token == "" {
				hint = ": the repository is gated or private; set HF_TOKEN to a token that has access"
			} else {
				hint = ": HF_TOKEN does not grant access to this repository (is its license accepted on the hub?)"
			}
		}
		return fmt.Errorf("%w: %s: HTTP %s%s", ErrAuth, d.ref.Raw, resp.Status, hint)
	case http.StatusNotFound:
		return fmt.Errorf("%w: %s: HTTP %s: no such file (check the organisation, repository, revision and file name)", ErrServer, d.ref.Raw, resp.Status)
	}
	return fmt.Errorf("%w: %s: HTTP %s", ErrServer, d.ref.Raw, resp.Status)
}

// retryable says whether a status may go away on its own.
func retryable(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusRequestTimeout || code >= 500
}

// openPartial opens the partial file and hashes what it holds, or starts it afresh
// when it came from another version of the file.
func (d *download) openPartial() error {
	rec := partRecord{URL: d.ref.URL, Size: d.size, SHA256: d.want, ETag: d.etag}
	var old partRecord
	b, err := os.ReadFile(d.partPath() + ".json")
	same := err == nil && json.Unmarshal(b, &old) == nil && old == rec
	f, err := os.OpenFile(d.partPath(), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	d.f, d.h = f, sha256.New()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	n := st.Size()
	switch {
	case n > 0 && !same:
		d.o.notice("the partial download of %s came from another version of the file; starting it again", d.ref.Raw)
		n = 0
	case d.size >= 0 && n > d.size:
		d.o.notice("the partial download of %s is longer than the file; starting it again", d.ref.Raw)
		n = 0
	}
	if n == 0 {
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("pull: %w", err)
		}
	} else if _, err := io.Copy(d.h, io.NewSectionReader(f, 0, n)); err != nil {
		return fmt.Errorf("pull: reading the partial download: %w", err)
	}
	if err := writeJSON(d.partPath()+".json", rec); err != nil {
		return err
	}
	d.off, d.resumed = n, n
	if n > 0 {
		d.o.notice("resuming %s at byte %d of %s", d.ref.Raw, n, sizeString(d.size))
	}
	return nil
}

func sizeString(n int64) string {
	if n < 0 {
		return "an unknown size"
	}
	return strconv.FormatInt(n, 10)
}

// fetchAll issues GETs until every byte is in: a dropped connection resumes at the
// byte reached. It gives up after Retries attempts in a row that bring no byte.
func (d *download) fetchAll(ctx context.Context) error {
	retries, backoff := d.retries(), d.backoff()
	d.progress(false)
	fails := 0
	for {
		if d.size >= 0 && d.off == d.size {
			return nil
		}
		start := d.off
		done, err := d.fetch(ctx)
		if done {
			return nil
		}
		var keep *keepPartial
		if ctx.Err() != nil {
			return &keepPartial{fmt.Errorf("pull: %s: stopped at byte %d of %s: %w", d.ref.Raw, d.off, sizeString(d.size), ctx.Err())}
		}
		if !errors.As(err, &keep) {
			return err // not worth retrying: the partial file is not trusted either
		}
		if d.off > start {
			fails = 0
		} else {
			fails++
		}
		if fails >= retries {
			return &keepPartial{fmt.Errorf("%w: %s: %d attempts in a row brought no byte (at byte %d of %s); the partial download is kept, run the pull again to resume: %w", ErrGaveUp, d.ref.Raw, fails, d.off, sizeString(d.size), keep.err)}
		}
		wait := backoff << min(max(fails-1, 0), 3)
		d.o.notice("%v; resuming at byte %d in %s", keep.err, d.off, wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// fetch issues one GET from d.off. done means every byte is in. A *keepPartial
// error is worth another attempt; any other error is final.
func (d *download) fetch(ctx context.Context) (done bool, err error) {
	req, err := d.request(ctx, http.MethodGet, d.ref.URL)
	if err != nil {
		return false, err
	}
	if d.off > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", d.off))
	}
	resp, err := d.client().Do(req)
	if err != nil {
		return false, &keepPartial{fmt.Errorf("pull: %s: %w", d.ref.Raw, scrub(err, d.o.Token))}
	}
	defer resp.Body.Close()
	body := io.Reader(resp.Body)
	switch {
	case resp.StatusCode == http.StatusPartialContent:
		first, total, err := parseContentRange(resp.Header.Get("Content-Range"))
		if err != nil {
			return false, fmt.Errorf("%w: %s: %v", ErrSize, d.ref.Raw, err)
		}
		if first != d.off {
			return false, fmt.Errorf("%w: %s: asked for the bytes from %d, the server sent them from %d (Content-Range %q)", ErrSize, d.ref.Raw, d.off, first, resp.Header.Get("Content-Range"))
		}
		if err := d.learnSize(total, "Content-Range"); err != nil {
			return false, err
		}
		if resp.ContentLength >= 0 && total >= 0 && first+resp.ContentLength != total {
			return false, fmt.Errorf("%w: %s: Content-Length %d from byte %d does not reach the total %d of Content-Range", ErrSize, d.ref.Raw, resp.ContentLength, first, total)
		}
	case resp.StatusCode == http.StatusOK:
		if err := d.learnSize(resp.ContentLength, "Content-Length"); err != nil {
			return false, err
		}
		if d.off > 0 { // the server ignored Range: skip what we have
			d.o.notice("the server of %s ignores Range requests; skipping the %d bytes already here", d.ref.Raw, d.off)
			if _, err := io.CopyN(io.Discard, body, d.off); err != nil {
				return false, &keepPartial{fmt.Errorf("pull: %s: connection lost while skipping to byte %d: %w", d.ref.Raw, d.off, err)}
			}
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		return false, fmt.Errorf("%w: %s: the server refuses the bytes from %d (HTTP 416): the file is shorter than the %s bytes announced (%s)", ErrSize, d.ref.Raw, d.off, sizeString(d.size), d.sizeFrom)
	case retryable(resp.StatusCode):
		return false, &keepPartial{fmt.Errorf("pull: %s: HTTP %s", d.ref.Raw, resp.Status)}
	default:
		return false, d.statusErr(resp)
	}
	if err := d.copy(ctx, body); err != nil {
		return false, err
	}
	return d.size < 0 || d.off == d.size, nil
}

// learnSize records a length a response announced, or fails when it contradicts
// the one announced before.
func (d *download) learnSize(n int64, from string) error {
	switch {
	case n < 0:
		return nil
	case d.size < 0:
		d.size, d.sizeFrom = n, from
		return nil
	case n != d.size:
		return fmt.Errorf("%w: %s: the server announced %d bytes (%s) and now %d (%s)", ErrSize, d.ref.Raw, d.size, d.sizeFrom, n, from)
	}
	return nil
}

// copy appends the body to the partial file, hashing as it goes, and never past the
// announced size. It stops as soon as ctx ends.
func (d *download) copy(ctx context.Context, body io.Reader) error {
	buf := make([]byte, 256<<10)
	for {
		if err := ctx.Err(); err != nil { // the transport may still hold buffered bytes
			return &keepPartial{err}
		}
		n, rerr := body.Read(buf)
		if n > 0 {
			if d.size >= 0 && d.off+int64(n) > d.size {
				return fmt.Errorf("%w: %s: the server sent more than the %d bytes it announced (%s)", ErrSize, d.ref.Raw, d.size, d.sizeFrom)
			}
			if _, err := d.f.WriteAt(buf[:n], d.off); err != nil {
				return fmt.Errorf("pull: writing %s: %w", d.partPath(), err)
			}
			d.h.Write(buf[:n])
			d.off += int64(n)
			d.progress(false)
		}
		if rerr == io.EOF {
			if d.size >= 0 && d.off < d.size {
				return &keepPartial{fmt.Errorf("pull: %s: the connection closed at byte %d of %d", d.ref.Raw, d.off, d.size)}
			}
			return nil
		}
		if rerr != nil {
			return &keepPartial{fmt.Errorf("pull: %s: connection lost at byte %d of %s: %w", d.ref.Raw, d.off, sizeString(d.size), scrub(rerr, d.o.Token))}
		}
	}
}

func (d *download) progress(final bool) {
	if d.o.Progress == nil {
		return
	}
	now := time.Now()
	every := d.o.ProgressEvery
	if every == 0 {
		every = 200 * time.Millisecond
	}
	rate := d.m.observe(now, d.off)
	if !final && !d.lastP.IsZero() && now.Sub(d.lastP) < every {
		return
	}
	d.lastP = now
	d.o.Progress(Progress{Ref: d.ref.Raw, Done: d.off, Total: d.size, Resumed: d.resumed, Rate: rate, ETA: eta(d.off, d.size, rate), Final: final})
}

// finish verifies the download and moves it into the cache.
func (d *download) finish() (Result, error) {
	d.progress(true)
	got := hex.EncodeToString(d.h.Sum(nil))
	if d.want != "" && got != d.want {
		d.discard()
		return Result{}, fmt.Errorf("%w: %s: the %s says %s but the %d bytes received hash to %s; the download was deleted (a corrupted transfer or a changed file): run the pull again", ErrDigest, d.ref.Raw, d.wantFrom, d.want, d.off, got)
	}
	var magic [4]byte
	if _, err := d.f.ReadAt(magic[:], 0); err != nil || !bytes.Equal(magic[:], []byte("GGUF")) {
		if strings.HasSuffix(strings.ToLower(d.ref.URL), ".gguf") || d.ref.Hub {
			d.discard()
			return Result{}, fmt.Errorf("%w: %s: the %d bytes received begin %q, not \"GGUF\"; the download was deleted", ErrNotGGUF, d.ref.Raw, d.off, magic[:])
		}
	}
	if err := d.f.Sync(); err != nil {
		return Result{}, fmt.Errorf("pull: %w", err)
	}
	d.f.Close()
	d.f = nil
	blob := d.o.blobPath(got)
	if err := os.Rename(d.partPath(), blob); err != nil {
		return Result{}, fmt.Errorf("pull: %w", err)
	}
	os.Remove(d.partPath() + ".json")
	rec := refRecord{Ref: d.ref.Raw, URL: d.ref.URL, SHA256: got, Size: d.off, Verified: d.wantFrom, Pulled: time.Now().UTC().Format(time.RFC3339)}
	if err := writeJSON(filepath.Join(d.o.Dir, "refs", d.key+".json"), rec); err != nil {
		return Result{}, err
	}
	return Result{Path: blob, SHA256: got, Size: d.off, Verified: d.wantFrom}, nil
}

// parseContentRange parses "bytes FIRST-LAST/TOTAL" (TOTAL may be "*": -1).
func parseContentRange(s string) (first, total int64, err error) {
	rest, ok := strings.CutPrefix(s, "bytes ")
	rng, tot, ok2 := strings.Cut(rest, "/")
	a, b, ok3 := strings.Cut(rng, "-")
	if !ok || !ok2 || !ok3 {
		return 0, 0, fmt.Errorf("bad Content-Range %q", s)
	}
	first, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	total = -1
	var err3 error
	if tot != "*" {
		total, err3 = strconv.ParseInt(tot, 10, 64)
	}
	if err1 != nil || err2 != nil || err3 != nil || first < 0 || last < first || (total >= 0 && last >= total) {
		return 0, 0, fmt.Errorf("bad Content-Range %q", s)
	}
	return first, total, nil
}

// scrub removes the token from an error's text (a URL error could quote a header).
// It reads the text to scrub it, not to match a kind. An error whose text holds the
// token becomes a new error with the text alone, on purpose: a chain kept for
// errors.Is/As would hand the token to anything that prints an inner error. An
// error without the token (the usual case: the token travels in a header) is
// returned as it is, its chain intact.
func scrub(err error, token string) error {
	if token == "" || !strings.Contains(err.Error(), token) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), token, "[HF_TOKEN]"))
}

// writeJSON writes v to path atomically.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	return nil
}
