package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/lmlite/lmlite/internal/testenv"
)

// sampleReport runs a short real load against the fixture: two tenants, one of
// them out of budget, so the report has latencies, throughput and errors.
func sampleReport(t *testing.T) *Report {
	t.Helper()
	f := &fixture{TTFT: 5 * time.Millisecond, ITL: 2 * time.Millisecond, Status: map[string]fixtureErr{"lml_poor": {429, "insufficient_quota"}}}
	srv := f.start(t)
	s := mustScenario(t, `
name: html-sample
description: "a <b>sample</b> & its tenants"
duration: 600ms
arrival: {type: poisson, rate: 60}
workload:
  output_tokens: {dist: uniform, min: 2, max: 8}
  tiers: [{tier_mode: balanced, max_latency_ms: 300}, {tier_mode: fixed, tier: fast}]
tenants:
  - {name: "<alice>", api_key: lml_a}
  - {name: poor, api_key: lml_poor}
`)
	rep, err := Run(context.Background(), Config{Scenario: s, Target: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	slos, _ := ParseSLOs("ttft_p99=1s,error_rate=1%")
	rep.CheckSLOs(slos)
	return rep
}

func TestWriteFiles(t *testing.T) {
	rep := sampleReport(t)
	dir := filepath.Join(t.TempDir(), "out")
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	// The JSON has the documented shape.
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	overall, _ := raw["overall"].(map[string]any)
	tenants, _ := raw["tenants"].(map[string]any)
	for _, k := range []string{"requests", "ok", "errors", "ttft_ms", "itl_ms", "e2e_ms", "rps", "tokens_per_s"} {
		if _, ok := overall[k]; !ok {
			t.Errorf("overall lacks %q", k)
		}
	}
	for _, k := range []string{"p50", "p90", "p99"} {
		if _, ok := overall["e2e_ms"].(map[string]any)[k]; !ok {
			t.Errorf("e2e_ms lacks %q", k)
		}
	}
	if len(tenants) != 2 || tenants["poor"].(map[string]any)["errors"].(map[string]any)["429"] == nil {
		t.Errorf("tenants %v", tenants)
	}
	back, err := ReadReport(filepath.Join(dir, "report.json"))
	if err != nil || back.Overall.Requests != rep.Overall.Requests {
		t.Errorf("round trip: %v", err)
	}
	h, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	html := string(h)
	if strings.Contains(html, "<alice>") || !strings.Contains(html, "&lt;alice&gt;") {
		t.Error("tenant name not escaped")
	}
	// What became of each set of tier options: served by the fixture's tier, or 429.
	if !strings.Contains(html, `id="asked"`) || !strings.Contains(html, "balanced max_latency_ms=300") || !strings.Contains(html, "fixed tier=fast") {
		t.Error("the tier options table is missing")
	}
	var sum strings.Builder
	if err := rep.WriteSummary(&sum); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sum.String(), `tier options "fixed tier=fast": fast `) || !strings.Contains(sum.String(), ", 429 ") {
		t.Errorf("summary lacks the tier options lines:\n%s", sum.String())
	}
	// The fixture's streams report 5 of their 7 prompt tokens as cached.
	if o := rep.Overall; o.CachedTokens == 0 || !strings.Contains(sum.String(), fmt.Sprintf("prefix cache: %d of %d prompt tokens", o.CachedTokens, o.PromptTokens)) {
		t.Errorf("cached tokens %d; summary:\n%s", o.CachedTokens, sum.String())
	}
	for _, bad := range []string{"src=", `href="http`, "url(", "@import", "<link rel=\"stylesheet"} {
		if strings.Contains(html, bad) {
			t.Errorf("report refers to something outside it (%q): it must be self-contained", bad)
		}
	}
}

// chromiumPath finds Debian's chromium; without it the browser test skips loudly
// (and fails in CI).
func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Missing(t, "chromium (Debian: apt-get install chromium)", exec.ErrNotFound)
	return ""
}

// TestHTMLInChromium opens the report in headless Chromium with no network and
// checks that it renders its charts and tables, that its script runs, that it
// loads nothing but itself, and that the console stays free of errors.
func TestHTMLInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	exe := chromiumPath(t)
	rep := sampleReport(t)
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The first call starts the browser; it must not carry the timeout (chromedp's rule).
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	ctx, cancelT := context.WithTimeout(bctx, 90*time.Second)
	defer cancelT()

	// Subscribe to the console (API calls, exceptions, browser log) and to every
	// request the page makes, before navigating.
	lctx, stopListening := context.WithCancel(ctx)
	console := chromedp.Console(lctx)
	requests := chromedp.Events(lctx, network.RequestWillBeSent)
	var problems, loaded []string
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for m, err := range console {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
				problems = append(problems, m.String()+" "+m.URL)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for ev, err := range requests {
			if err != nil {
				return
			}
			loaded = append(loaded, ev.Request.URL)
		}
	}()

	url := "file://" + filepath.Join(dir, "report.html")
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#summary"))); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	eval := func(js string) any {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[any](js))
		if err != nil {
			t.Fatalf("evaluate %s: %v", js, err)
		}
		return v
	}
	charts := eval(`document.querySelectorAll("svg.chart").length`)
	chartsByScript := eval(`Number(document.body.getAttribute("data-charts"))`)
	rows := eval(`document.querySelector("#summary").rows.length`)
	askedRows := eval(`document.querySelector("#asked").rows.length`)
	jain := eval(`document.getElementById("jain").textContent`)
	title := eval(`document.title`)
	// Hovering a data point shows its tooltip (the inline script works).
	tip := eval(`(function(){
		var el = document.querySelector("svg.chart [data-tip]");
		el.dispatchEvent(new MouseEvent("mousemove", {clientX: 10, clientY: 10, bubbles: true}));
		return document.getElementById("tip").textContent;
	})()`)
	if err := chromedp.Do(ctx, chromedp.Sleep(300*time.Millisecond)); err != nil { // let late messages arrive
		t.Fatal(err)
	}
	stopListening()
	wg.Wait()

	for _, p := range problems {
		t.Errorf("console: %s", p)
	}
	for _, u := range loaded {
		if u != url && !strings.HasPrefix(u, "data:") {
			t.Errorf("the report loaded %s: it must be self-contained", u)
		}
	}
	if len(loaded) == 0 {
		t.Error("saw no request at all: the network listener is broken")
	}
	if charts != 6.0 || chartsByScript != 6.0 {
		t.Errorf("%v charts (script counted %v), want 6", charts, chartsByScript)
	}
	if rows != float64(1+len(rep.Tenants)+1) {
		t.Errorf("summary has %v rows", rows)
	}
	if askedRows != 3.0 {
		t.Errorf("tier options table has %v rows, want a header and 2", askedRows)
	}
	if want := fmt.Sprintf("%.3f", *rep.Fairness.Jain); jain != want {
		t.Errorf("fairness shown %q, want %q", jain, want)
	}
	if !strings.Contains(fmt.Sprint(title), "html-sample") || tip == "" {
		t.Errorf("title %q tooltip %q", title, tip)
	}
}
