package gateway

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/openai/openai-go"

	"github.com/lmlite/lmlite/batch"
	"github.com/lmlite/lmlite/internal/testenv"
	"github.com/lmlite/lmlite/money"
)

// -dashboard.screenshots rewrites docs/dashboard-tenant.png and
// docs/dashboard-operator.png (for the README) from TestDashboardInChromium; make
// test leaves them alone.
var dashShots = flag.Bool("dashboard.screenshots", false, "save the dashboard screenshots under docs/")

// TestDashboardInChromium drives the dashboards in headless Chromium: a tenant signs
// in with its key and sees what it spent through the API (to the nano-dollar and
// token), its refused request labelled, a cancelled batch's progress as far as it got,
// a small spend climbing its chart; the panel updates without a reload after new
// requests, another tenant's usage is not there, the console stays clean, and both
// views fit 1280 px and a 390 px phone. The operator sees the markup tenant as text,
// refusals by reason, only the model buttons that apply, unloads a model with the
// button, and a POST without the CSRF token is refused.
func TestDashboardInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	exe := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			exe = p
			break
		}
	}
	if exe == "" {
		testenv.Missing(t, "chromium (Debian: apt-get install chromium)", exec.ErrNotFound)
	}
	bs, err := batch.OpenStore(filepath.Join(t.TempDir(), "batch"))
	if err != nil {
		t.Fatal(err)
	}
	eng := newFakeEngine()
	ts := startServerWith(t, dashConfig, eng, Options{Batches: bs, BatchConcurrency: 2}, withLoader)
	chat := func(tenant, model string) {
		t.Helper()
		resp, body := ts.post("/v1/chat/completions", ts.keys[tenant],
			`{"model":"`+model+`","max_tokens":8,"messages":[{"role":"user","content":"hello there"}]}`)
		if resp.StatusCode != 200 {
			t.Fatalf("chat: %d %s", resp.StatusCode, body)
		}
	}
	spent := func(tenant string) (n int, in, out int, cost money.Money) {
		for _, e := range ts.ledger() {
			if e.Tenant == tenant {
				n, in, out, cost = n+1, in+e.PromptTokens, out+e.CompletionTokens, cost+e.Cost
			}
		}
		return
	}
	chat("shop", "tiny")
	chat("shop", "big")
	chat("shop", "tiny")
	chat("twotier", "tiny") // another tenant: shop must not see it
	if resp, _ := ts.post("/v1/chat/completions", ts.keys["shop"], `{"model":"tiny","messages":[],"bogus":1}`); resp.StatusCode != 400 {
		t.Fatalf("bad request: %d", resp.StatusCode)
	}
	// A batch cancelled after a few of its lines ran.
	eng.Delay = 5 * time.Millisecond
	sdk := ts.client("shop")
	var lines []string
	for i := range 40 {
		lines = append(lines, chatLine(fmt.Sprint(i), "tiny", 2, ""))
	}
	started := eng.started.Load()
	job := newBatch(t, sdk, upload(t, sdk, lines...).ID, nil)
	for eng.started.Load() < started+4 {
		time.Sleep(time.Millisecond)
	}
	if _, err := sdk.Batches.Cancel(context.Background(), job.ID); err != nil {
		t.Fatal(err)
	}
	job = waitBatch(t, sdk, job.ID)
	eng.Delay = 0
	ran := job.RequestCounts.Completed // the fake engine fails no line: the failed never ran
	if job.Status != openai.BatchStatusCancelled || ran == 0 || ran+job.RequestCounts.Failed != 40 || job.RequestCounts.Failed == 0 {
		t.Fatalf("batch %s: %+v", job.Status, job.RequestCounts)
	}

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(bctx); err != nil { // starts the browser, without the timeout
		t.Fatalf("starting chromium: %v", err)
	}
	ctx, cancelT := context.WithTimeout(bctx, 90*time.Second)
	defer cancelT()
	lctx, stopListening := context.WithCancel(ctx)
	var problems []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m, err := range chromedp.Console(lctx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
				problems = append(problems, m.String()+" "+m.URL)
			}
		}
	}()
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("chromium: %v", err)
		}
	}
	eval := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[any](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("evaluate %s: %v", js, err)
		}
		return fmt.Sprint(v)
	}
	text := func(id string) string { return eval(`(document.getElementById("` + id + `")||{}).textContent`) }
	signIn := func(key string) {
		t.Helper()
		do(chromedp.Navigate(ts.url+"/dashboard"), chromedp.WaitVisible(chromedp.CSS("#key")),
			chromedp.SendKeys(chromedp.CSS("#key"), key), chromedp.Submit(chromedp.CSS("#key")),
			chromedp.WaitVisible(chromedp.CSS("#panel")))
	}
	// fits checks the page at 1280 px and on a 390 px phone: the page is no wider than
	// the screen, and no table is wider than the page (none needs a sideways scroll).
	fits := func(view string) {
		t.Helper()
		for _, w := range []int64{390, 1280} {
			do(chromedp.EmulateViewport(w, 844))
			if got := eval(`document.documentElement.scrollWidth`); got != fmt.Sprint(w) {
				t.Errorf("%s at %d px: the page is %s px wide", view, w, got)
			}
			wide := eval(`Array.from(document.querySelectorAll("table")).filter(t => t.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5 || t.scrollWidth > t.clientWidth + 1).map(t => t.id + ":" + t.scrollWidth).join(" ")`)
			if wide != "" {
				t.Errorf("%s at %d px: tables wider than the screen: %s", view, w, wide)
			}
		}
		do(chromedp.EmulateViewport(1280, 900))
	}
	shot := func(name string) {
		if !*dashShots {
			return
		}
		b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "docs", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The tenant view: shop's numbers are what shop spent, and nothing of twotier's.
	signIn(ts.keys["shop"])
	n, in, out, cost := spent("shop")
	if got := text("tenant"); got != "shop" {
		t.Fatalf("signed in as %q", got)
	}
	want := map[string]string{"total-requests": fmt.Sprint(n), "total-input": fmt.Sprint(in), "total-output": fmt.Sprint(out),
		"total-cost": dashUSD(cost.Dollars()), "spent-day": dashUSD(cost.Dollars()),
		"left-day": dashUSD((money.USD(0.01) - cost).Dollars()), "left-month": dashUSD((money.USD(0.2) - cost).Dollars())}
	for id, w := range want {
		if got := text(id); got != w {
			t.Errorf("#%s = %q, want %q (the ledger's)", id, got, w)
		}
	}
	if n != 4+int(ran) { // three chats, the bad request (admitted before its body was decoded: a 400 at no cost) and the batch's lines that ran
		t.Errorf("shop settled %d requests, want %d", n, 4+ran)
	}
	// The bad request's row says why it has no model or tier.
	if got := eval(`Array.from(document.querySelectorAll("#by-model tbody tr")).map(r => r.cells[0].textContent).join("|")`); got != "big|tiny|refused before a model was chosen" {
		t.Errorf("model rows %q", got)
	}
	// The cancelled batch shows the share of its lines that ran, not a full bar.
	row := `document.querySelector('#batches tr[data-batch="` + job.ID + `"]')`
	if got, want := eval(row+`.querySelector("progress").value`), fmt.Sprint(float64(ran)/40); got != want {
		t.Errorf("cancelled batch's progress %s, want %s (%d of 40 ran)", got, want, ran)
	}
	if got, want := eval(row+`.querySelector(".counts").textContent`), fmt.Sprintf("%d done, 0 failed, %d not run of 40", ran, job.RequestCounts.Failed); got != want {
		t.Errorf("cancelled batch's counts %q, want %q", got, want)
	}
	// A spend of a tenth of the budget climbs its chart: the axis fits the spend, and the
	// budget far above it is named.
	for _, id := range []string{"spend-chart", "month-chart"} {
		top := eval(`Math.min(...document.querySelector("#` + id + ` polyline").getAttribute("points").trim().split(/\s+/).map(p => Number(p.split(",")[1])))`)
		if v, _ := strconv.ParseFloat(top, 64); v > 100 {
			t.Errorf("#%s: the spend line tops at y=%s of 200: flat", id, top)
		}
	}
	if got := eval(`document.querySelector('#refusals td[data-reason="bad_request"]').textContent`); got != "1" {
		t.Errorf("bad_request refusals %s, want 1", got)
	}
	if got := eval(`document.querySelectorAll("svg.chart line.budget, svg.chart text.budget-off").length`); got != "2" {
		t.Errorf("%s budget lines or notes, want 2", got)
	}
	if c := eval(`document.cookie`); c != "" {
		t.Errorf("the session cookie is readable by scripts: %q", c)
	}
	if got := eval(`document.querySelectorAll("svg.chart polyline").length`); got != "2" {
		t.Errorf("%s spend charts", got)
	}
	shot("dashboard-tenant.png")
	fits("tenant view")

	// Live: new requests show within 5 s, without a reload.
	eval(`window.__same = 1`)
	chat("shop", "tiny")
	chat("shop", "tiny")
	n, _, _, cost = spent("shop")
	deadline := time.Now().Add(5 * time.Second)
	for text("total-requests") != fmt.Sprint(n) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if got := text("total-requests"); got != fmt.Sprint(n) {
		t.Errorf("after 5 s the page shows %s requests, want %d", got, n)
	}
	if got := text("total-cost"); got != dashUSD(cost.Dollars()) {
		t.Errorf("cost %s, want %s", got, dashUSD(cost.Dollars()))
	}
	if eval(`String(window.__same)`) != "1" {
		t.Error("the page reloaded")
	}
	// A cannot see B: the panel has no tenant parameter to turn, and the usage API with
	// the session's cookie alone (no key) is refused.
	if got := eval(`fetch("/dashboard/panel?tenant=twotier").then(r => r.text()).then(t => t.includes('id="total-requests">` + fmt.Sprint(n) + `<'))`); got != "true" {
		t.Errorf("the panel with ?tenant=twotier is not shop's own: %s", got)
	}
	if got := eval(`fetch("/v1/organization/usage/completions?start_time=0").then(r => r.status)`); got != "401" {
		t.Errorf("usage API with only the dashboard cookie: %s", got)
	}
	// A POST without the CSRF token is refused.
	if got := eval(`fetch("/dashboard/logout", {method: "POST"}).then(r => r.status)`); got != "403" {
		t.Errorf("sign-out without CSRF: %s", got)
	}
	do(chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#login")))

	// The operator view.
	signIn("admin-secret")
	do(chromedp.WaitVisible(chromedp.CSS("#tenants")))
	if got := eval(`document.querySelectorAll("img").length`); got != "0" {
		t.Errorf("%s img elements: the markup tenant was rendered as markup", got)
	}
	found := eval(`Array.from(document.querySelectorAll("#tenants .tenant-id")).some(td => td.textContent === "<img\fsrc=x\fonerror=alert(1)>")`)
	if found != "true" {
		t.Error("the markup tenant is not shown as text")
	}
	if got := eval(`document.querySelector('#tenants tr[data-tenant="shop"] td:nth-child(3)').textContent`); got != fmt.Sprint(n) {
		t.Errorf("operator: shop %s requests today, want %d", got, n)
	}
	// Refusals by reason, per tenant and for the server.
	if got := eval(`document.querySelector('#tenants tr[data-tenant="shop"] .refusals').textContent`); got != "1 (bad_request 1)" {
		t.Errorf("operator: shop's refusals %q", got)
	}
	if got := eval(`document.querySelector('#refusals-today td[data-reason="bad_request"]').textContent`); got != "1" {
		t.Errorf("operator: bad_request refusals today %s, want 1", got)
	}
	// Only the button that applies: tiny is loaded.
	buttons := func(model string) string {
		return eval(`Array.from(document.querySelectorAll('tr[data-model="` + model + `"] button')).map(b => b.textContent + (b.disabled ? "-" : "+")).join(" ")`)
	}
	if got := buttons("tiny"); got != "Load- Unload+" {
		t.Errorf("a loaded model's buttons %q, want Load disabled", got)
	}
	shot("dashboard-operator.png")
	fits("operator view")
	if got := eval(`fetch("/dashboard/models/tiny/unload", {method: "POST"}).then(r => r.status)`); got != "403" {
		t.Errorf("unload without CSRF: %s", got)
	}
	if st := ts.srv.modelStatuses()[0]; st.State != "ready" {
		t.Fatalf("tiny is %s before the button", st.State)
	}
	do(chromedp.Click(chromedp.CSS(`tr[data-model="tiny"] button.unload`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if got := text("flash"); got != "unload tiny: ok" {
		t.Errorf("flash %q", got)
	}
	if got := eval(`document.querySelector('tr[data-model="tiny"] .state').textContent`); got != "unloaded" {
		t.Errorf("tiny shows %q after unload", got)
	}
	if got := buttons("tiny"); got != "Load+ Unload-" {
		t.Errorf("an unloaded model's buttons %q, want Unload disabled", got)
	}
	if st := ts.srv.modelStatuses()[0]; st.State != "unloaded" {
		t.Errorf("tiny is %s after the button", st.State)
	}
	do(chromedp.Sleep(300 * time.Millisecond))
	stopListening()
	wg.Wait()
	// The refusals the test asked for on purpose are logged as failed loads; nothing
	// else may be.
	expected := []string{"/v1/organization/usage/completions?start_time=0", "/dashboard/logout", "/dashboard/models/tiny/unload"}
	for _, p := range problems {
		if strings.Contains(p, "Failed to load resource") && slices.ContainsFunc(expected, func(u string) bool { return strings.HasSuffix(p, ts.url+u) }) {
			continue
		}
		t.Errorf("console: %s", p)
	}
}

// dashUSD is the dashboard's money format.
func dashUSD(v float64) string {
	s := strings.TrimRight(strings.TrimRight(formatFloat(v, 6), "0"), ".")
	return "$" + s
}
