package gateway

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/tenancy"
)

// xssTenant is a tenant whose id is markup: the dashboards must show it as text.
// Tenant ids may not hold spaces, so the attributes are separated by form feeds,
// which HTML reads as spaces too.
const xssTenant = "<img\fsrc=x\fonerror=alert(1)>"

var dashConfig = testConfig + `  - {id: "<img\fsrc=x\fonerror=alert(1)>", plan: open}
  - {id: shop, plan: open, overrides: {daily_budget_usd: 0.01, monthly_budget_usd: 0.2, max_concurrency: 4}}
`

// loaderEngine is the fake engine with load and unload (the dashboard's buttons).
type loaderEngine struct {
	*fakeEngine
	mu       sync.Mutex
	unloaded map[string]bool
}

func withLoader(f *fakeEngine) Engine {
	return &loaderEngine{fakeEngine: f, unloaded: map[string]bool{}}
}

func (l *loaderEngine) Load(id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.unloaded, id)
	return nil
}

func (l *loaderEngine) Unload(id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unloaded[id] = true
	return nil
}

func (l *loaderEngine) Models() []engine.ModelStatus {
	ms := l.fakeEngine.Models()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range ms {
		if l.unloaded[ms[i].ID] {
			ms[i].State, ms[i].Replicas, ms[i].MemoryBytes = engine.StateUnloaded, 0, 0
		}
	}
	return ms
}

// browser is an HTTP client with a cookie jar that does not follow redirects.
func browser(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func send(t *testing.T, c *http.Client, method, u string, form url.Values) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, u, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func TestDashboardSessionCookieAndSignOut(t *testing.T) {
	ts := startServerWith(t, dashConfig, newFakeEngine(), Options{}, nil)
	c := browser(t)
	if resp, body := send(t, c, "GET", ts.url+"/dashboard", nil); resp.StatusCode != 200 || !strings.Contains(body, `id="login"`) {
		t.Fatalf("signed out: %d", resp.StatusCode)
	}
	// A sign-in posted from another site is refused.
	req, _ := http.NewRequest("POST", ts.url+"/dashboard/login", strings.NewReader(url.Values{"key": {ts.keys["acme"]}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	if resp, err := c.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("cross-origin sign-in: %v %v", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	if resp, _ := send(t, c, "POST", ts.url+"/dashboard/login", url.Values{"key": {"lml_wrong"}}); resp.StatusCode != 401 {
		t.Errorf("wrong key: %d", resp.StatusCode)
	}
	resp, _ := send(t, c, "POST", ts.url+"/dashboard/login", url.Values{"key": {ts.keys["acme"]}})
	if resp.StatusCode != 303 {
		t.Fatalf("sign in: %d", resp.StatusCode)
	}
	sc := resp.Header.Get("Set-Cookie")
	for _, want := range []string{"lmlite_dash=", "HttpOnly", "SameSite=Strict", "Max-Age=28800", "path=/dashboard"} {
		if !strings.Contains(strings.ToLower(sc), strings.ToLower(want)) {
			t.Errorf("cookie %q lacks %s", sc, want)
		}
	}
	if strings.Contains(sc, ts.keys["acme"]) {
		t.Error("the cookie holds the API key")
	}
	if strings.Contains(strings.ToLower(sc), "secure") {
		t.Error("Secure cookie over plain HTTP (the browser would drop it)")
	}
	resp, body := send(t, c, "GET", ts.url+"/dashboard", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `id="tenant">acme<`) {
		t.Fatalf("tenant view: %d", resp.StatusCode)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	// Sign-out needs the CSRF token too.
	if resp, _ := send(t, c, "POST", ts.url+"/dashboard/logout", url.Values{}); resp.StatusCode != 403 {
		t.Errorf("sign-out without CSRF: %d", resp.StatusCode)
	}
	csrf := between(body, `name="csrf" value="`, `"`)
	if resp, _ := send(t, c, "POST", ts.url+"/dashboard/logout", url.Values{"csrf": {csrf}}); resp.StatusCode != 303 {
		t.Errorf("sign-out: %d", resp.StatusCode)
	}
	if resp, _ := send(t, c, "GET", ts.url+"/dashboard/panel", nil); resp.StatusCode != 401 {
		t.Errorf("panel after sign-out: %d", resp.StatusCode)
	}
	// Revoking the key ends the sessions it opened.
	send(t, c, "POST", ts.url+"/dashboard/login", url.Values{"key": {ts.keys["acme"]}})
	if resp, _ := send(t, c, "GET", ts.url+"/dashboard/panel", nil); resp.StatusCode != 200 {
		t.Fatalf("panel: %d", resp.StatusCode)
	}
	id, _, _ := tenancy.ParseKey(ts.keys["acme"])
	if _, err := ts.store.RevokeKey(id, time.Now()); err != nil {
		t.Fatal(err)
	}
	if resp, _ := send(t, c, "GET", ts.url+"/dashboard/panel", nil); resp.StatusCode != 401 {
		t.Errorf("panel after the key was revoked: %d", resp.StatusCode)
	}
}

func TestDashboardOperatorEscapesAndRefusesPostsWithoutCSRF(t *testing.T) {
	ts := startServerWith(t, dashConfig, newFakeEngine(), Options{}, withLoader)
	c := browser(t)
	if resp, _ := send(t, c, "POST", ts.url+"/dashboard/login", url.Values{"key": {"admin-secret"}}); resp.StatusCode != 303 {
		t.Fatalf("sign in: %d", resp.StatusCode)
	}
	_, body := send(t, c, "GET", ts.url+"/dashboard", nil)
	if strings.Contains(body, xssTenant) || !strings.Contains(body, "&lt;img\fsrc=x\fonerror=alert(1)&gt;") {
		t.Error("the markup tenant id is not escaped")
	}
	csrf := between(body, `name="csrf" value="`, `"`)
	if resp, _ := send(t, c, "POST", ts.url+"/dashboard/models/tiny/unload", url.Values{}); resp.StatusCode != 403 {
		t.Errorf("unload without CSRF: %d", resp.StatusCode)
	}
	if resp, _ := send(t, c, "POST", ts.url+"/dashboard/models/tiny/unload", url.Values{"csrf": {flipFirst(csrf)}}); resp.StatusCode != 403 {
		t.Errorf("unload with a wrong CSRF token: %d", resp.StatusCode)
	}
	if st := ts.srv.modelStatuses()[0]; st.ID != "tiny" || st.State != engine.StateReady {
		t.Fatalf("tiny %+v before unloading", st)
	}
	resp, body := send(t, c, "POST", ts.url+"/dashboard/models/tiny/unload", url.Values{"csrf": {csrf}})
	if resp.StatusCode != 200 || !strings.Contains(body, "unload tiny: ok") {
		t.Errorf("unload: %d", resp.StatusCode)
	}
	if st := ts.srv.modelStatuses()[0]; st.State != engine.StateUnloaded {
		t.Errorf("tiny %s after unload", st.State)
	}
	// A tenant's session cannot use the operator's actions.
	tc := browser(t)
	send(t, tc, "POST", ts.url+"/dashboard/login", url.Values{"key": {ts.keys["acme"]}})
	_, tb := send(t, tc, "GET", ts.url+"/dashboard", nil)
	tcsrf := between(tb, `name="csrf" value="`, `"`)
	if resp, _ := send(t, tc, "POST", ts.url+"/dashboard/models/big/unload", url.Values{"csrf": {tcsrf}}); resp.StatusCode != 404 {
		t.Errorf("a tenant unloading a model: %d", resp.StatusCode)
	}
	if resp, _ := send(t, tc, "POST", ts.url+"/dashboard/keys", url.Values{"csrf": {tcsrf}, "tenant": {"acme"}}); resp.StatusCode != 404 {
		t.Errorf("a tenant creating a key: %d", resp.StatusCode)
	}
	// Keys: created (shown once), then revoked.
	resp, body = send(t, c, "POST", ts.url+"/dashboard/keys", url.Values{"csrf": {csrf}, "tenant": {"acme"}})
	key := between(body, `(shown once): <code>`, `</code>`)
	if resp.StatusCode != 200 || !strings.HasPrefix(key, "lml_") {
		t.Fatalf("create key: %d %q", resp.StatusCode, key)
	}
	if tenant, _, err := ts.store.Authenticate(key); err != nil || tenant != "acme" {
		t.Fatalf("new key: %s %v", tenant, err)
	}
	id, _, err := tenancy.ParseKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := send(t, c, "POST", ts.url+"/dashboard/keys/"+id+"/revoke", url.Values{"csrf": {csrf}}); resp.StatusCode != 200 {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	if _, _, err := ts.store.Authenticate(key); err == nil {
		t.Error("revoked key still works")
	}
}

func between(s, a, b string) string {
	_, rest, ok := strings.Cut(s, a)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, b)
	return v
}

// flipFirst changes the first character of a hex token.
func flipFirst(tok string) string {
	if tok == "" {
		return "x"
	}
	if tok[0] == '0' {
		return "1" + tok[1:]
	}
	return "0" + tok[1:]
}

func TestDashboardShowsTheTenantsBatchJobsOnly(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	c := ts.client("acme")
	f := upload(t, c, chatLine("a", "tiny", 3, ""), chatLine("b", "tiny", 5, ""))
	b := waitBatch(t, c, newBatch(t, c, f.ID, nil).ID)
	web := browser(t)
	send(t, web, "POST", ts.url+"/dashboard/login", url.Values{"key": {ts.keys["acme"]}})
	_, body := send(t, web, "GET", ts.url+"/dashboard/panel", nil)
	row := between(body, `<tr data-batch="`+b.ID+`">`, "</tr>")
	if !strings.Contains(row, "completed") || !strings.Contains(row, "2 done, 0 failed of 2") {
		t.Errorf("batch row %q", row)
	}
	other := browser(t)
	for tenant := range ts.keys {
		if tenant != "acme" {
			send(t, other, "POST", ts.url+"/dashboard/login", url.Values{"key": {ts.keys[tenant]}})
			break
		}
	}
	if resp, body := send(t, other, "GET", ts.url+"/dashboard/panel", nil); resp.StatusCode != 200 || strings.Contains(body, b.ID) {
		t.Errorf("another tenant's panel (%d) shows acme's batch, or did not open", resp.StatusCode)
	}
}
