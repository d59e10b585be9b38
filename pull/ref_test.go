package pull

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestResolve(t *testing.T) {
	cat := Catalogue{"tiny": {Pull: "hf://o/r/t.gguf", SHA256: strings.Repeat("a", 64)}}
	for _, tc := range []struct {
		raw, url string
		hub      bool
		sha      string
	}{
		{"hf://Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf", "http://hub.test/Qwen/Qwen3-0.6B-GGUF/resolve/main/Qwen3-0.6B-Q8_0.gguf", true, ""},
		{"hf://org/repo@v1.0/sub dir/m.gguf", "http://hub.test/org/repo/resolve/v1.0/sub%20dir/m.gguf", true, ""},
		{"https://example.test/a/m.gguf", "https://example.test/a/m.gguf", false, ""},
		{"tiny", "http://hub.test/o/r/resolve/main/t.gguf", true, strings.Repeat("a", 64)},
	} {
		r, err := Resolve(tc.raw, "http://hub.test/", cat)
		if err != nil || r.URL != tc.url || r.Hub != tc.hub || r.SHA256 != tc.sha || r.Raw != tc.raw {
			t.Errorf("Resolve(%q) = %+v, %v; want %s hub=%v", tc.raw, r, err, tc.url, tc.hub)
		}
	}
	for _, bad := range []string{"", "hf://org", "hf://org/repo", "hf://org/repo/", "hf://org/../x.gguf", "ftp://x/y", "https://user:pw@x/y.gguf", "nosuchname"} {
		if _, err := Resolve(bad, "http://hub.test", cat); !errors.Is(err, ErrBadRef) {
			t.Errorf("Resolve(%q): %v, want ErrBadRef", bad, err)
		}
	}
	t.Setenv("HF_ENDPOINT", "http://mirror.test")
	if r, _ := Resolve("hf://o/r/m.gguf", "", cat); r.URL != "http://mirror.test/o/r/resolve/main/m.gguf" {
		t.Errorf("HF_ENDPOINT not honoured: %s", r.URL)
	}
}

func TestBuiltinCatalogueResolves(t *testing.T) {
	c := Builtin()
	if len(c) == 0 {
		t.Fatal("empty built-in catalogue")
	}
	for name := range c {
		if r, err := Resolve(name, "", nil); err != nil || !r.Hub {
			t.Errorf("%s: %+v, %v", name, r, err)
		}
	}
	if _, err := ParseCatalogue([]byte("models:\n  x: {pull: hf://a/b/c.gguf, sha: 1}\n")); err == nil {
		t.Error("an unknown catalogue field was accepted")
	}
}

func TestParseContentRange(t *testing.T) {
	for _, tc := range []struct {
		s            string
		first, total int64
		ok           bool
	}{
		{"bytes 0-99/100", 0, 100, true},
		{"bytes 50-99/*", 50, -1, true},
		{"bytes 50-100/100", 0, 0, false},
		{"bytes 60-50/100", 0, 0, false},
		{"bytes -5/100", 0, 0, false},
		{"items 0-1/2", 0, 0, false},
		{"", 0, 0, false},
	} {
		f, tot, err := parseContentRange(tc.s)
		if (err == nil) != tc.ok || (tc.ok && (f != tc.first || tot != tc.total)) {
			t.Errorf("parseContentRange(%q) = %d, %d, %v", tc.s, f, tot, err)
		}
	}
}

func FuzzParseContentRange(f *testing.F) {
	f.Add("bytes 0-99/100")
	f.Add("bytes 5-9/*")
	f.Fuzz(func(t *testing.T, s string) {
		first, total, err := parseContentRange(s)
		if err == nil && (first < 0 || (total >= 0 && first >= total)) {
			t.Fatalf("%q: first %d total %d accepted", s, first, total)
		}
	})
}

func TestMeterRateAndETA(t *testing.T) {
	var m meter
	t0 := time.Unix(0, 0)
	if r := m.observe(t0, 0); r != 0 {
		t.Fatalf("first observation gives rate %v", r)
	}
	// 1 MB/s steady for 10 s.
	var r float64
	for i := 1; i <= 10; i++ {
		r = m.observe(t0.Add(time.Duration(i)*time.Second), int64(i)*1e6)
	}
	if r < 0.999e6 || r > 1.001e6 {
		t.Fatalf("steady 1 MB/s measured as %v", r)
	}
	// The rate halves: after one half-life (2 s) the estimate is half way there.
	r = m.observe(t0.Add(12*time.Second), 11e6)
	if r < 0.74e6 || r > 0.76e6 {
		t.Fatalf("after one half-life at 0.5 MB/s: %v, want 0.75e6", r)
	}
	if e := eta(5e6, 10e6, 1e6); e != 5*time.Second {
		t.Errorf("eta = %v", e)
	}
	if eta(5, -1, 1) != -1 || eta(5, 10, 0) != -1 {
		t.Error("eta of an unknown size or rate is not -1")
	}
}
