package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/loadtest"
)

// sseServer streams three chunks per request, OpenAI style.
func sseServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"w%d\"}}]}\n\n", i)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestLoadtestCommand(t *testing.T) {
	srv := sseServer(t)
	dir := t.TempDir()
	scen := filepath.Join(dir, "s.yaml")
	if err := os.WriteFile(scen, []byte("name: cmd\nduration: 5s\narrival: {type: closed, users: 2}\ntenants: [{name: a}, {name: b}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	// --requests replaces the scenario's 5s bound.
	if err := runLoadtest([]string{"--scenario", scen, "--target", srv.URL, "--requests", "12", "--out", out, "--quiet", "--slo", "e2e_p99=10s,error_rate=0"}); err != nil {
		t.Fatal(err)
	}
	rep, err := loadtest.ReadReport(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Overall.Requests != 12 || rep.Overall.OK != 12 || rep.Overall.CompletionTokens != 36 || len(rep.Tenants) != 2 || rep.Meta.StoppedBy != loadtest.StopRequests {
		t.Errorf("report: %+v", rep.Overall)
	}
	if _, err := os.Stat(filepath.Join(out, "report.html")); err != nil {
		t.Error(err)
	}
	// --per-request logs one JSON line per request, warm-up included.
	out3 := filepath.Join(dir, "out3")
	if err := runLoadtest([]string{"--scenario", scen, "--target", srv.URL, "--requests", "5", "--out", out3, "--quiet", "--per-request"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out3, "requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var rec loadtest.Record
	if len(lines) != 5 || json.Unmarshal([]byte(lines[0]), &rec) != nil || rec.Status != 200 || rec.Chunks != 3 || rec.CompletionTokens != 3 || rec.E2Ems <= 0 {
		t.Errorf("requests.jsonl: %d lines, first %+v", len(lines), rec)
	}
	// A missed SLO makes the command fail (release gating), the reports still written.
	out2 := filepath.Join(dir, "out2")
	err = runLoadtest([]string{"--scenario", scen, "--target", srv.URL, "--requests", "4", "--out", out2, "--quiet", "--slo", "ttft_p50=1ns"})
	if !errors.Is(err, errSLOMissed) {
		t.Errorf("missed SLO: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out2, "report.json")); err != nil {
		t.Error(err)
	}
	if err := runLoadtest([]string{"compare", filepath.Join(out, "report.json"), filepath.Join(out2, "report.json")}); err != nil {
		t.Errorf("compare: %v", err)
	}
	// Refusals: a remote target, an unbounded duration, missing flags.
	if err := runLoadtest([]string{"--scenario", scen, "--target", "http://192.0.2.7:8080", "--out", out}); !errors.Is(err, loadtest.ErrRemote) {
		t.Errorf("remote target: %v", err)
	}
	if err := runLoadtest([]string{"--scenario", scen, "--target", srv.URL, "--duration", "2h", "--out", out}); !errors.Is(err, loadtest.ErrScenario) {
		t.Errorf("2h duration: %v", err)
	}
	if err := runLoadtest([]string{"--target", srv.URL}); !errors.Is(err, errUsage) {
		t.Errorf("no scenario: %v", err)
	}
	if err := runLoadtest([]string{"compare", "one.json"}); !errors.Is(err, errUsage) {
		t.Errorf("compare with one file: %v", err)
	}
}
