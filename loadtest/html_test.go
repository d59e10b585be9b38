package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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
	if !strings.Contains(sum.String(), `tier options "fixed tier=fast": fast `) || !strings.Contains(sum.String(), ", 429 ") ||
		!regexp.MustCompile(`tier options "balanced max_latency_ms=300": fast \d+, 429 \d+; e2e p50 [0-9.]+ms p99 [0-9.]+ms, ttft p50 [0-9.]+ms p99 [0-9.]+ms\n`).MatchString(sum.String()) {
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
	rows := eval(`document.querySelectorAll("#summary tbody tr").length`)
	askedRows := eval(`document.querySelectorAll("#asked tbody tr").length`)
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
	if charts != 7.0 || chartsByScript != 7.0 {
		t.Errorf("%v charts (script counted %v), want 7", charts, chartsByScript)
	}
	if rows != float64(len(rep.Tenants)+1) {
		t.Errorf("summary has %v rows", rows)
	}
	if askedRows != 2.0 {
		t.Errorf("tier options table has %v rows, want 2", askedRows)
	}
	if want := fmt.Sprintf("%.3f", *rep.Fairness.Jain); jain != want {
		t.Errorf("fairness shown %q, want %q", jain, want)
	}
	if !strings.Contains(fmt.Sprint(title), "html-sample") || tip == "" {
		t.Errorf("title %q tooltip %q", title, tip)
	}
}

// startChromium starts headless Chromium with no network access of its own and
// returns a context for chromedp actions, bounded by a timeout.
func startChromium(t *testing.T) context.Context {
	t.Helper()
	exe := chromiumPath(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", false),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	bctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	if err := chromedp.Do(bctx); err != nil { // starts the browser, without the timeout
		t.Fatalf("starting chromium: %v", err)
	}
	ctx, cancelT := context.WithTimeout(bctx, 90*time.Second)
	t.Cleanup(cancelT)
	return ctx
}

// wideReport runs a real load with many tenants of long names and many sets of
// tier options, then widens every figure to the longest a report shows (six-digit
// latencies and counts, several error kinds), the worst case for the layout.
func wideReport(t *testing.T) *Report {
	t.Helper()
	f := &fixture{TTFT: time.Millisecond, ITL: time.Millisecond, Status: map[string]fixtureErr{"lml_poor": {429, "insufficient_quota"}}}
	srv := f.start(t)
	y := `
name: a-scenario-with-a-rather-long-name-for-the-layout
duration: 500ms
arrival: {type: poisson, rate: 120}
workload:
  output_tokens: 3
  tiers:
    - {tier_mode: balanced, max_latency_ms: 300}
    - {tier_mode: balanced, max_latency_ms: 2000, max_cost_usd: 0.0002}
    - {tier_mode: fixed, tier: fast}
    - {tier_mode: deep, max_latency_ms: 3000}
    - {tier_mode: deep, max_cost_usd: 0.00015}
    - {tier_mode: max}
tenants:
`
	for i := range 9 {
		key := "lml_" + strconv.Itoa(i)
		if i == 8 {
			key = "lml_poor"
		}
		y += fmt.Sprintf("  - {name: tenant-with-a-long-descriptive-name-%02d, api_key: %s}\n", i, key)
	}
	rep, err := Run(context.Background(), Config{Scenario: mustScenario(t, y), Target: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	pct := Percentiles{P50: 123456.7, P90: 234567.8, P99: 345678.9, Mean: 1, Max: 456789, N: 999999}
	widen := func(m *Metrics) {
		m.Requests, m.OK, m.Good = 999999, 888888, 777777
		m.Errors = map[string]int{"429": 99999, "500": 99999, ErrTransport: 99999, ErrStream: 99999, ErrDropped: 99999}
		m.TTFT, m.ITL, m.E2E = pct, pct, pct
		m.RPS, m.TokensPerS, m.GoodputRPS = 12345.67, 1234567.8, 12345.67
		m.QuotaExhausted, m.RateLimited, m.PaymentRequired = 99999, 99999, 99999
		if m.AskedLatency == nil {
			m.AskedLatency = map[string]AskLatency{}
		}
		for ask, outs := range m.Asked {
			for k := range outs {
				outs[k] = 99999
			}
			for _, k := range []string{"fast", "balanced", "deep", "max", "429", "500", ErrTransport} {
				outs[k] = 99999
			}
			m.AskedLatency[ask] = AskLatency{TTFT: pct, E2E: pct}
		}
	}
	widen(&rep.Overall)
	for n, m := range rep.Tenants {
		widen(&m)
		rep.Tenants[n] = m
	}
	if len(rep.Overall.Asked) != 6 || len(rep.Tenants) != 9 {
		t.Fatalf("%d tier options, %d tenants", len(rep.Overall.Asked), len(rep.Tenants))
	}
	return rep
}

// TestHTMLFitsLaptopScreen opens the widest report at 1280×800: the page has no
// horizontal scroll and neither do its tables, the charts fill the width (two a
// row), and the latency of each set of tier options is shown. With
// LMLITE_SCREENSHOT=FILE.png it saves a full-page screenshot to look at.
func TestHTMLFitsLaptopScreen(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	ctx := startChromium(t)
	rep := wideReport(t)
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	url := "file://" + filepath.Join(dir, "report.html")
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#summary"))); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	type layout struct {
		Inner, Scroll                        float64   // window.innerWidth, document.scrollingElement.scrollWidth
		Summary, SummaryBox, Asked, AskedBox float64   // the tables' scrollWidth and their boxes' clientWidth
		Charts                               float64   // the charts' container width
		Row                                  []float64 // widths of the charts in the first row
		AskedHead                            string
		AskedRow                             []string
	}
	l, err := chromedp.Run(ctx, chromedp.Evaluate[layout](`(function(){
		const sum = document.getElementById("summary"), asked = document.getElementById("asked");
		const charts = [...document.querySelectorAll("svg.chart")];
		const top = charts[0].getBoundingClientRect().top;
		return {
			Inner: window.innerWidth, Scroll: document.scrollingElement.scrollWidth,
			Summary: sum.scrollWidth, SummaryBox: sum.parentElement.clientWidth,
			Asked: asked.scrollWidth, AskedBox: asked.parentElement.clientWidth,
			Charts: document.querySelector(".charts").clientWidth,
			Row: charts.filter(c => Math.abs(c.getBoundingClientRect().top - top) < 1).map(c => c.getBoundingClientRect().width),
			AskedHead: asked.tHead.textContent.replace(/\s+/g, " "),
			AskedRow: [...asked.tBodies[0].rows[0].cells].map(c => c.textContent),
		};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if path := os.Getenv("LMLITE_SCREENSHOT"); path != "" {
		// What a 1280×800 screen shows, then the whole page beside it.
		shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		full, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		fullPath := strings.TrimSuffix(path, ".png") + "-full.png"
		if err := errors.Join(os.WriteFile(path, shot, 0o644), os.WriteFile(fullPath, full, 0o644)); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshots in %s and %s", path, fullPath)
	}
	t.Logf("layout at 1280×800: %+v", l)
	if l.Inner != 1280 {
		t.Fatalf("viewport %v wide, want 1280", l.Inner)
	}
	if l.Scroll > 1280 {
		t.Errorf("the page is %v px wide: it scrolls sideways at 1280", l.Scroll)
	}
	if l.Summary > l.SummaryBox || l.Asked > l.AskedBox {
		t.Errorf("a table scrolls inside its box: summary %v in %v, tier options %v in %v", l.Summary, l.SummaryBox, l.Asked, l.AskedBox)
	}
	used := 0.0
	for _, w := range l.Row {
		used += w
	}
	if len(l.Row) < 2 || used < 0.9*l.Charts || l.Charts < 1280-2*24-20 {
		t.Errorf("charts: %v in the first row of a %v-px area; want at least two filling it", l.Row, l.Charts)
	}
	for _, h := range []string{"TTFT (ms)", "end to end (ms)", "p50", "p99"} {
		if !strings.Contains(l.AskedHead, h) {
			t.Errorf("the tier options table's head %q lacks %q", l.AskedHead, h)
		}
	}
	if n := len(l.AskedRow); n < 4 || l.AskedRow[n-1] != "345679" || l.AskedRow[n-2] != "123457" {
		t.Errorf("the tier options row %q does not end with its end-to-end p50 and p99", l.AskedRow)
	}
}
