package gateway

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine"
)

// TestEngineMetricsSeries scrapes /metrics of a gateway in front of the real engine
// after a request and compares the engine's series (their HELP and TYPE lines, names
// and labels; not the values, which vary with the machine) with
// testdata/engine_metrics.golden, written from the scrape before issue 36 moved the
// Prometheus presentation out of the engine: the series did not change with it.
func TestEngineMetricsSeries(t *testing.T) {
	es := startEngine(t, `
ledger: {sync: process}
models:
  - {id: tiny, path: $TINY, max_model_len: 256, replicas: 2}
plans:
  open: {}
tenants:
  - {id: acme, plan: open}
`, engine.Config{})
	resp, body := (&testServer{t: t, url: es.base}).post("/v1/completions", es.key, `{"model":"tiny","prompt":"once upon a time","max_tokens":4,"temperature":0}`)
	if resp.StatusCode != 200 {
		t.Fatalf("completion: %d %s", resp.StatusCode, body)
	}
	_, scrape := (&testServer{t: t, url: es.base}).get("/metrics", "")
	value := regexp.MustCompile(` [^ ]+$`)
	var got []string
	for _, line := range strings.Split(scrape, "\n") {
		name := strings.TrimPrefix(strings.TrimPrefix(line, "# HELP "), "# TYPE ")
		if !strings.HasPrefix(name, "lmlite_engine_") {
			continue
		}
		if !strings.HasPrefix(line, "#") {
			line = value.ReplaceAllString(line, "")
		}
		got = append(got, line)
	}
	path := filepath.Join("testdata", "engine_metrics.golden")
	if *updateGolden {
		if err := os.WriteFile(path, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if g := strings.Join(got, "\n") + "\n"; g != string(want) {
		t.Errorf("engine series differ from %s:\n%s", path, diffLines(string(want), g))
	}
}

// diffLines lists the lines only in want (-) and only in got (+).
func diffLines(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var out []string
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}
