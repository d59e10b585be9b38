package pull

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine/genmodel"
)

var (
	modelOnce sync.Once
	modelData []byte
)

// model is a generated GGUF (tiny llama, q8_0): real bytes of the format we pull.
func model(t *testing.T) []byte {
	t.Helper()
	modelOnce.Do(func() {
		w, err := genmodel.Build(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 1})
		if err != nil {
			panic(err)
		}
		var b bytes.Buffer
		if _, err := w.WriteTo(&b); err != nil {
			panic(err)
		}
		modelData = b.Bytes()
	})
	return modelData
}

// hub is a loopback server that behaves like the Hugging Face hub (a resolve URL
// that redirects to a CDN, with X-Linked-Etag and X-Linked-Size on the redirect)
// and misbehaves on demand.
type hub struct {
	data   []byte
	digest string

	mu          sync.Mutex
	drops       []int64 // cut the connection when a response reaches each offset (once each)
	corruptAt   int64   // flip this byte of every body that covers it; -1: none
	announce    int64   // X-Linked-Size; 0: the true size
	badDigest   string  // X-Linked-Etag instead of the true digest
	shiftRange  int64   // answer a Range request from this many bytes later
	status      int     // answer every GET of the CDN with this status; 0: serve
	token       string  // the bearer token the resolve URL requires; "": none
	noRange     bool    // ignore Range headers (answer 200 with the whole file)
	starts      []int64 // the first byte of each CDN GET
	served      int64   // body bytes written
	heads, gets int
	auths       []string // Authorization headers seen, per path
}

func newHub(t *testing.T) (*hub, *httptest.Server) {
	data := model(t)
	sum := sha256.Sum256(data)
	h := &hub{data: data, digest: hex.EncodeToString(sum[:]), corruptAt: -1}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv
}

func (h *hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.auths = append(h.auths, r.URL.Path+" "+r.Header.Get("Authorization"))
	switch r.URL.Path {
	case "/org/repo/resolve/main/m.gguf":
		if h.token != "" && r.Header.Get("Authorization") != "Bearer "+h.token {
			http.Error(w, "Access to model org/repo is restricted.", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodHead {
			h.heads++
		}
		size := h.announce
		if size == 0 {
			size = int64(len(h.data))
		}
		digest := h.digest
		if h.badDigest != "" {
			digest = h.badDigest
		}
		w.Header().Set("X-Linked-Etag", `"`+digest+`"`)
		w.Header().Set("X-Linked-Size", strconv.FormatInt(size, 10))
		w.Header().Set("X-Repo-Commit", "0123456789abcdef0123456789abcdef01234567")
		http.Redirect(w, r, "/cdn/m", http.StatusFound)
	case "/old-name/repo/resolve/main/m.gguf": // a renamed repository
		http.Redirect(w, r, "/org/repo/resolve/main/m.gguf", http.StatusTemporaryRedirect)
	case "/cdn/m", "/plain/m.gguf":
		if r.Method == http.MethodHead {
			h.heads++
			w.Header().Set("Content-Length", strconv.Itoa(len(h.data)))
			return
		}
		h.serveBytes(w, r, h.data)
	case "/plain/page.gguf":
		h.serveBytes(w, r, []byte("<html>sign in to download</html>"))
	default:
		http.NotFound(w, r)
	}
}

// serveBytes answers a GET of data with its Range and the misbehaviours set.
func (h *hub) serveBytes(w http.ResponseWriter, r *http.Request, data []byte) {
	h.gets++
	if h.status != 0 {
		http.Error(w, "busy", h.status)
		return
	}
	n := int64(len(data))
	start := int64(0)
	if rg := r.Header.Get("Range"); rg != "" && !h.noRange {
		s, ok := strings.CutPrefix(rg, "bytes=")
		s, ok2 := strings.CutSuffix(s, "-")
		v, err := strconv.ParseInt(s, 10, 64)
		if !ok || !ok2 || err != nil {
			http.Error(w, "bad range", http.StatusBadRequest)
			return
		}
		if v >= n {
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start = v + h.shiftRange
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, n-1, n))
		w.Header().Set("Content-Length", strconv.FormatInt(n-start, 10))
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	}
	h.starts = append(h.starts, start)
	end := n
	cut := -1
	for i, d := range h.drops {
		if d > start && d < end {
			end, cut = d, i
		}
	}
	body := slices.Clone(data[start:end])
	if h.corruptAt >= start && h.corruptAt < end {
		body[h.corruptAt-start] ^= 0x20
	}
	w.Write(body)
	h.served += int64(len(body))
	if cut >= 0 {
		h.drops = slices.Delete(h.drops, cut, cut+1)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection is closed mid-body
	}
}

func (h *hub) set(f func(h *hub)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

func (h *hub) snapshot() (starts []int64, served int64, heads, gets int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.starts), h.served, h.heads, h.gets
}

// opts are test options: the hub on loopback, fast retries, notices collected.
func opts(t *testing.T, srv *httptest.Server, dir string) (Options, *notes) {
	n := &notes{}
	return Options{Dir: dir, Endpoint: srv.URL, Catalogue: Catalogue{}, Backoff: time.Millisecond, Notice: n.add}, n
}

type notes struct {
	mu sync.Mutex
	l  []string
}

func (n *notes) add(s string) { n.mu.Lock(); n.l = append(n.l, s); n.mu.Unlock() }
func (n *notes) all() string  { n.mu.Lock(); defer n.mu.Unlock(); return strings.Join(n.l, "\n") }

const hubRef = "hf://org/repo/m.gguf"

func mustPull(t *testing.T, raw string, o Options) Result {
	t.Helper()
	r, err := Pull(context.Background(), raw, o)
	if err != nil {
		t.Fatalf("Pull(%s): %v", raw, err)
	}
	return r
}

func checkBlob(t *testing.T, r Result, want []byte) {
	t.Helper()
	got, err := os.ReadFile(r.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes, not the %d served", r.Path, len(got), len(want))
	}
	sum := sha256.Sum256(want)
	if r.SHA256 != hex.EncodeToString(sum[:]) || filepath.Base(r.Path) != "sha256-"+r.SHA256+".gguf" {
		t.Fatalf("result %+v: want digest %x", r, sum)
	}
}

// files lists the cache's files under sub (e.g. "blobs").
func files(t *testing.T, dir, sub string) []string {
	t.Helper()
	es, _ := os.ReadDir(filepath.Join(dir, sub))
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestPullResumesAfterDropsAtRandomOffsetsWithoutStartingOver(t *testing.T) {
	h, srv := newHub(t)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	var drops []int64
	for range 6 {
		drops = append(drops, 1+rng.Int64N(int64(len(h.data))-1))
	}
	slices.Sort(drops)
	drops = slices.Compact(drops)
	h.set(func(h *hub) { h.drops = slices.Clone(drops) })
	t.Logf("seed %d: %d bytes, drops at %v", seed, len(h.data), drops)

	o, n := opts(t, srv, t.TempDir())
	r := mustPull(t, hubRef, o)
	checkBlob(t, r, h.data)
	if r.Verified != "hub X-Linked-Etag" || r.Cached {
		t.Errorf("result %+v: want verified against the hub's X-Linked-Etag, not cached", r)
	}
	starts, served, _, _ := h.snapshot()
	// Each attempt starts where the previous connection was cut: never from 0 again.
	if want := append([]int64{0}, drops...); !slices.Equal(starts, want) {
		t.Errorf("GETs started at %v, want %v", starts, want)
	}
	if served != int64(len(h.data)) {
		t.Errorf("the server sent %d bytes for a %d-byte file", served, len(h.data))
	}
	if !strings.Contains(n.all(), "resuming at byte") {
		t.Errorf("notices do not say the pull resumed:\n%s", n.all())
	}
	if p := files(t, o.Dir, "partial"); len(p) != 0 {
		t.Errorf("partial files left: %v", p)
	}
}

func TestSecondPullAndConcurrentPullsDownloadOnce(t *testing.T) {
	h, srv := newHub(t)
	dir := t.TempDir()
	const procs = 3
	var wg sync.WaitGroup
	results := make([]Result, procs)
	errs := make([]error, procs)
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, _ := opts(t, srv, dir) // each its own lock file descriptor, as another process has
			results[i], errs[i] = Pull(context.Background(), hubRef, o)
		}()
	}
	wg.Wait()
	for i := range procs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		checkBlob(t, results[i], h.data)
	}
	_, served, heads, gets := h.snapshot()
	if served != int64(len(h.data)) || gets != 1 {
		t.Errorf("%d concurrent pulls: %d GETs, %d bytes served; want one download of %d", procs, gets, served, len(h.data))
	}

	o, _ := opts(t, srv, dir)
	r := mustPull(t, hubRef, o)
	if !r.Cached {
		t.Errorf("a second pull was not answered from the cache: %+v", r)
	}
	if _, _, heads2, gets2 := h.snapshot(); heads2 != heads || gets2 != gets {
		t.Errorf("a cached pull touched the network: HEADs %d→%d, GETs %d→%d", heads, heads2, gets, gets2)
	}
}

func TestOfflineAnswersFromTheCacheOnly(t *testing.T) {
	h, srv := newHub(t)
	o, _ := opts(t, srv, t.TempDir())
	o.Offline = true
	if _, err := Pull(context.Background(), hubRef, o); !errors.Is(err, ErrNotCached) {
		t.Fatalf("offline pull of an uncached file: %v, want ErrNotCached", err)
	}
	if _, _, heads, gets := h.snapshot(); heads+gets != 0 {
		t.Fatalf("offline pull made %d requests", heads+gets)
	}
	o.Offline = false
	mustPull(t, hubRef, o)
	srv.Close() // nothing to reach any more
	o.Offline = true
	r := mustPull(t, hubRef, o)
	checkBlob(t, r, h.data)
	if l, err := Lookup(hubRef, o); err != nil || l.Path != r.Path {
		t.Errorf("Lookup: %+v, %v", l, err)
	}
}

func TestCorruptByteIsNeverKept(t *testing.T) {
	h, srv := newHub(t)
	h.set(func(h *hub) { h.corruptAt = int64(len(h.data)) / 3; h.drops = []int64{int64(len(h.data)) / 2} })
	o, _ := opts(t, srv, t.TempDir())
	_, err := Pull(context.Background(), hubRef, o)
	if !errors.Is(err, ErrDigest) {
		t.Fatalf("a corrupted byte: %v, want ErrDigest", err)
	}
	for _, want := range []string{h.digest, "X-Linked-Etag", "deleted", "run the pull again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	for _, sub := range []string{"blobs", "partial", "refs"} {
		if f := files(t, o.Dir, sub); len(f) != 0 {
			t.Errorf("%s/ keeps %v after a corrupt download", sub, f)
		}
	}
	// Once the server is healthy the same pull succeeds from scratch.
	h.set(func(h *hub) { h.corruptAt = -1 })
	checkBlob(t, mustPull(t, hubRef, o), h.data)
}

func TestServersThatLieAboutLengthsFailClearly(t *testing.T) {
	for _, tc := range []struct {
		name string
		lie  func(h *hub)
		ref  string
		err  error
		says string
	}{
		{"X-Linked-Size larger than the file", func(h *hub) { h.announce = int64(len(h.data)) + 100 }, hubRef, ErrSize, "X-Linked-Size"},
		{"X-Linked-Size smaller than the file", func(h *hub) { h.announce = int64(len(h.data)) - 100 }, hubRef, ErrSize, "X-Linked-Size"},
		{"a range from the wrong byte", func(h *hub) { h.drops = []int64{1000}; h.shiftRange = 7 }, hubRef, ErrSize, "asked for the bytes from 1000"},
		{"a digest that is not the file's", func(h *hub) { h.badDigest = strings.Repeat("ab", 32) }, hubRef, ErrDigest, strings.Repeat("ab", 32)},
		{"a sign-in page served as .gguf", func(h *hub) {}, "PLAIN/plain/page.gguf", ErrNotGGUF, "not \"GGUF\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, srv := newHub(t)
			h.set(tc.lie)
			o, _ := opts(t, srv, t.TempDir())
			ref := strings.Replace(tc.ref, "PLAIN", srv.URL, 1)
			_, err := Pull(context.Background(), ref, o)
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v; want %v saying %q", err, tc.err, tc.says)
			}
			for _, sub := range []string{"blobs", "partial", "refs"} {
				if f := files(t, o.Dir, sub); len(f) != 0 {
					t.Errorf("%s/ keeps %v", sub, f)
				}
			}
		})
	}
}

func TestPullResumesAcrossProcesses(t *testing.T) {
	h, srv := newHub(t)
	o, _ := opts(t, srv, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	half := int64(len(h.data)) / 2
	o.ProgressEvery = time.Nanosecond
	o.Progress = func(p Progress) {
		if p.Done >= half {
			cancel() // the process is killed half way
		}
	}
	if _, err := Pull(ctx, hubRef, o); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted pull: %v", err)
	}
	st, err := os.Stat(filepath.Join(o.Dir, "partial", refKey(srv.URL+"/org/repo/resolve/main/m.gguf")+".part"))
	if err != nil || st.Size() < half {
		t.Fatalf("the partial download is not kept: %v", err)
	}
	var first Progress
	o.Progress = func(p Progress) {
		if first.Ref == "" {
			first = p
		}
	}
	r := mustPull(t, hubRef, o)
	checkBlob(t, r, h.data)
	starts, _, _, _ := h.snapshot()
	if len(starts) != 2 || starts[1] != st.Size() {
		t.Errorf("GETs started at %v; want the second at the %d bytes kept", starts, st.Size())
	}
	if first.Resumed != st.Size() || first.Total != int64(len(h.data)) {
		t.Errorf("first progress %+v: want Resumed %d of %d", first, st.Size(), len(h.data))
	}
}

func TestPartialFromAnotherVersionStartsOver(t *testing.T) {
	h, srv := newHub(t)
	o, n := opts(t, srv, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	o.ProgressEvery = time.Nanosecond
	o.Progress = func(p Progress) {
		if p.Done > 0 {
			cancel()
		}
	}
	Pull(ctx, hubRef, o)
	o.Progress = nil
	// The repository now holds another file under the same name.
	other := slices.Clone(h.data)
	other[len(other)-1] ^= 1
	sum := sha256.Sum256(other)
	h.set(func(h *hub) { h.data, h.digest, h.starts = other, hex.EncodeToString(sum[:]), nil })
	checkBlob(t, mustPull(t, hubRef, o), other)
	if starts, _, _, _ := h.snapshot(); !slices.Equal(starts, []int64{0}) {
		t.Errorf("GETs started at %v; a partial download of another version must not be resumed", starts)
	}
	if !strings.Contains(n.all(), "another version") {
		t.Errorf("notices do not say why it started over:\n%s", n.all())
	}
}

func TestServerIgnoringRangeSkipsTheBytesItHas(t *testing.T) {
	h, srv := newHub(t)
	h.set(func(h *hub) { h.noRange = true; h.drops = []int64{12345} })
	o, n := opts(t, srv, t.TempDir())
	checkBlob(t, mustPull(t, hubRef, o), h.data)
	if !strings.Contains(n.all(), "ignores Range") {
		t.Errorf("notices:\n%s", n.all())
	}
}

func TestGatedRepoUsesTheTokenAndNeverShowsIt(t *testing.T) {
	const secret = "hf_0123456789secretsecret"
	h, srv := newHub(t)
	h.set(func(h *hub) { h.token = secret })
	o, n := opts(t, srv, t.TempDir())

	_, err := Pull(context.Background(), hubRef, o)
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "set HF_TOKEN") {
		t.Fatalf("no token: %v, want ErrAuth asking for HF_TOKEN", err)
	}
	o.Token = "hf_wrong" + secret
	if _, err = Pull(context.Background(), hubRef, o); !errors.Is(err, ErrAuth) || strings.Contains(err.Error(), secret) {
		t.Fatalf("wrong token: %v", err)
	}
	o.Token = secret
	h.set(func(h *hub) { h.drops = []int64{5000} })
	checkBlob(t, mustPull(t, hubRef, o), h.data)
	if strings.Contains(n.all(), secret) {
		t.Errorf("a notice shows the token:\n%s", n.all())
	}
	// The token goes to the hub only: not to another server.
	if _, err := Pull(context.Background(), srv.URL+"/plain/m.gguf", o); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range h.auths {
		if strings.HasPrefix(a, "/plain/") && strings.Contains(a, secret) {
			t.Errorf("the token was sent to a non-hub URL: %s", a)
		}
	}
}

func TestGivesUpWhenNoAttemptMakesProgress(t *testing.T) {
	h, srv := newHub(t)
	h.set(func(h *hub) { h.status = http.StatusServiceUnavailable })
	o, _ := opts(t, srv, t.TempDir())
	o.Retries = 3
	_, err := Pull(context.Background(), hubRef, o)
	if !errors.Is(err, ErrGaveUp) || !strings.Contains(err.Error(), "503") {
		t.Fatalf("got %v, want ErrGaveUp naming the 503", err)
	}
	if _, _, _, gets := h.snapshot(); gets != 3 {
		t.Errorf("%d GETs, want 3", gets)
	}
}

func TestPlainURLWithoutDigestIsUnverified(t *testing.T) {
	h, srv := newHub(t)
	o, _ := opts(t, srv, t.TempDir())
	r := mustPull(t, srv.URL+"/plain/m.gguf", o)
	checkBlob(t, r, h.data)
	if r.Verified != "" {
		t.Errorf("verified against %q; the server gave no digest", r.Verified)
	}
	// --sha256 pins it: a wrong pin fails, the right one verifies.
	o2, _ := opts(t, srv, t.TempDir())
	o2.SHA256 = strings.Repeat("0", 64)
	if _, err := Pull(context.Background(), srv.URL+"/plain/m.gguf", o2); !errors.Is(err, ErrDigest) {
		t.Fatalf("wrong --sha256: %v", err)
	}
	o2.SHA256 = h.digest
	if r := mustPull(t, srv.URL+"/plain/m.gguf", o2); r.Verified != "--sha256" {
		t.Errorf("verified %q", r.Verified)
	}
}

func TestRenamedRepositoryIsStillVerified(t *testing.T) {
	h, srv := newHub(t)
	o, _ := opts(t, srv, t.TempDir())
	r := mustPull(t, "hf://old-name/repo/m.gguf", o)
	checkBlob(t, r, h.data)
	if r.Verified != "hub X-Linked-Etag" {
		t.Errorf("verified %q: the digest behind the rename's redirect was not read", r.Verified)
	}
}

func TestNotFoundSaysSo(t *testing.T) {
	_, srv := newHub(t)
	o, _ := opts(t, srv, t.TempDir())
	_, err := Pull(context.Background(), "hf://org/nope/m.gguf", o)
	if !errors.Is(err, ErrServer) || !strings.Contains(err.Error(), "404") {
		t.Fatalf("got %v", err)
	}
}
