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
	"sync"
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

// TestLoadtestCompareWarnsOnDifferentScenarios compares reports of two runs: the
// same scenario gives the table alone; another output length gives a warning
// naming the field, on stderr and above the table.
func TestLoadtestCompareWarnsOnDifferentScenarios(t *testing.T) {
	dir := t.TempDir()
	write := func(name, yaml string) string {
		t.Helper()
		s, err := loadtest.ParseScenario([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		rep := &loadtest.Report{Meta: loadtest.Meta{Scenario: s.Name, Spec: s.Spec(), WindowS: 10, StoppedBy: loadtest.StopDuration},
			Overall: loadtest.Metrics{Requests: 10, OK: 10}}
		d := filepath.Join(dir, name)
		if err := rep.WriteFiles(d); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(d, "report.json")
	}
	const sc = "name: cmp\nduration: 10s\narrival: {type: poisson, rate: 2}\nworkload: {output_tokens: 16}\ntenants: [{name: a}]\n"
	a := write("a", sc)
	same := write("same", sc)
	longer := write("longer", strings.Replace(sc, "output_tokens: 16", "output_tokens: 64", 1))

	out, errOut := captureOutput(t)
	if err := runLoadtest([]string{"compare", a, same}); err != nil {
		t.Fatal(err)
	}
	if o, e := out.take(), errOut.take(); strings.Contains(o+e, "WARNING") || strings.Contains(e, "warning") || !strings.Contains(o, "e2e_p99_ms") {
		t.Errorf("same scenario: stdout\n%s\nstderr\n%s", o, e)
	}
	if err := runLoadtest([]string{"compare", a, longer}); err != nil {
		t.Fatal(err)
	}
	o, e := out.take(), errOut.take()
	const diff = "workload.output_tokens.value: A 16, B 64"
	if !strings.Contains(e, "warning: "+a+" and "+longer+" are not like for like") || !strings.Contains(e, diff) {
		t.Errorf("stderr lacks the warning:\n%s", e)
	}
	if !strings.Contains(o, "WARNING: the two runs differ") || !strings.Contains(o, diff) || strings.Index(o, diff) > strings.Index(o, "e2e_p99_ms") {
		t.Errorf("stdout lacks the warning above the table:\n%s", o)
	}
}

// TestLoadtestABCommand: `lmlite loadtest ab` sends each round to every target with
// its own key, writes ab.json, and refuses a key list that does not match the targets.
func TestLoadtestABCommand(t *testing.T) {
	var mu sync.Mutex // guards seen
	var seen [2][]string
	mk := func(i int) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[i] = append(seen[i], r.Header.Get("Authorization"))
			mu.Unlock()
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"w\"}}]}\n\ndata: [DONE]\n\n")
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	a, b := mk(0), mk(1)
	dir := t.TempDir()
	scen := filepath.Join(dir, "s.yaml")
	if err := os.WriteFile(scen, []byte("duration: 5s\narrival: {type: closed, users: 1}\ntenants: [{name: a}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := runLoadtest([]string{"ab", "--scenario", scen, "--target", a.URL, "--target", b.URL, "--api-key", "ka", "--api-key", "kb",
		"--rounds", "5", "--warmup-rounds", "1", "--out", out}); err != nil {
		t.Fatal(err)
	}
	var rep loadtest.ABReport
	if raw, err := os.ReadFile(filepath.Join(out, "ab.json")); err != nil || json.Unmarshal(raw, &rep) != nil {
		t.Fatalf("ab.json: %v", err)
	}
	if rep.Rounds != 5 || len(rep.Targets) != 2 || rep.Targets[1].TTFTDiff == nil || rep.Targets[1].TTFTDiff.Pairs != 5 {
		t.Errorf("report: %+v", rep)
	}
	raw, err := os.ReadFile(filepath.Join(out, "rounds.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(raw)), "\n"); len(lines) != 5 || !strings.Contains(lines[0], `"ok":[true,true]`) {
		t.Errorf("rounds.jsonl: %q, want 5 rounds of two targets", raw)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen[0]) != 6 || len(seen[1]) != 6 || seen[0][0] != "Bearer ka" || seen[1][0] != "Bearer kb" {
		t.Errorf("requests: %v / %v, want 6 each with its own key", seen[0], seen[1])
	}
	err = runLoadtest([]string{"ab", "--scenario", scen, "--target", a.URL, "--target", b.URL, "--api-key", "k1", "--api-key", "k2", "--api-key", "k3"})
	if !errors.Is(err, errUsage) {
		t.Errorf("three keys for two targets: %v, want a usage error", err)
	}
}
