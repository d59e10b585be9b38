package gateway

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestGrafanaDashboardUsesOnlyExportedMetrics checks that every metric the Grafana
// dashboard (deploy/grafana/lmlite.json) queries is one the gateway registers, so the
// dashboard does not drift from metrics.go.
func TestGrafanaDashboardUsesOnlyExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("../deploy/grafana/lmlite.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, testConfig, newFakeEngine())
	known := map[string]bool{}
	ch := make(chan *prometheus.Desc, 256)
	go func() { ts.srv.metrics.reg.Describe(ch); close(ch) }()
	name := regexp.MustCompile(`fqName: "([a-z_:]+)"`)
	for desc := range ch {
		if m := name.FindStringSubmatch(desc.String()); m != nil {
			known[m[1]] = true
		}
	}
	used := regexp.MustCompile(`lmlite_[a-z_]+`)
	n := 0
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range used.FindAllString(tg.Expr, -1) {
				base := m
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(m, suf); ok && known[b] {
						base = b
					}
				}
				n++
				if !known[base] {
					t.Errorf("panel %q queries %s, which the gateway does not export", p.Title, m)
				}
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d metric references", n)
	}
}
