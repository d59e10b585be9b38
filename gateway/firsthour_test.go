package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// Issue 35: what a new user meets in the first hour.

// A browser that opens the server's root is sent to the dashboard; an API client (no
// text/html in Accept) still gets OpenAI's JSON 404.
func TestRootSendsBrowsersToTheDashboardAndAPIClientsA404(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(accept string) *http.Response {
		req, _ := http.NewRequest("GET", ts.url+"/", nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	browser := get("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	if loc, _ := browser.Location(); browser.StatusCode != 303 || loc == nil || loc.Path != "/dashboard" {
		t.Errorf("GET / from a browser: %d Location %q, want 303 to /dashboard", browser.StatusCode, browser.Header.Get("Location"))
	}
	for _, accept := range []string{"", "application/json", "*/*"} {
		resp, body := ts.get("/", "")
		if accept != "" {
			resp = get(accept)
		}
		if resp.StatusCode != 404 {
			t.Errorf("GET / with Accept %q: %d, want the JSON 404", accept, resp.StatusCode)
		}
		if accept == "" {
			decodeError(t, body)
		}
	}
}

// The admin key sent to /v1 is told that it is the admin key and which key serves
// inference, without the key in the answer.
func TestAdminKeyOnV1SaysItIsTheAdminKey(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	resp, body := ts.post("/v1/chat/completions", "admin-secret", `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`)
	e := decodeError(t, body)
	if resp.StatusCode != 401 || !strings.Contains(e.Error.Message, "this is the admin key") ||
		!strings.Contains(e.Error.Message, "tenant API key") {
		t.Errorf("admin key on /v1: %d %s", resp.StatusCode, body)
	}
	if strings.Contains(body, "admin-secret") {
		t.Errorf("the answer echoes the key: %s", body)
	}
	// Any other wrong key is still just incorrect.
	if _, body := ts.post("/v1/chat/completions", "lml_bogus", `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`); !strings.Contains(body, "incorrect API key provided") {
		t.Errorf("a bogus key: %s", body)
	}
}

// A number in metadata.max_cost_usd (OpenAI's metadata values are strings) is a 400
// naming the field and saying what is expected, not Go's decoder message.
func TestBatchNumericMaxCostSaysItMustBeAString(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	key := ts.keys["acme"]
	_, body := rawUpload(t, ts, key, linesOf(1, "m"))
	f := decodeFile(t, body)
	b, _ := json.Marshal(map[string]any{"input_file_id": f.ID, "endpoint": "/v1/chat/completions",
		"completion_window": "24h", "metadata": map[string]any{"note": "x", "max_cost_usd": 0.5}})
	resp, body := ts.post("/v1/batches", key, string(b))
	e := decodeError(t, body)
	if resp.StatusCode != 400 || e.Error.Param == nil || *e.Error.Param != "metadata.max_cost_usd" ||
		!strings.Contains(e.Error.Message, `must be a string such as "0.50"`) ||
		strings.Contains(e.Error.Message, "Go struct") {
		t.Errorf("numeric max_cost_usd: %d %s", resp.StatusCode, body)
	}
}

// A tenant's key asking for another tenant's usage through project_ids is told about
// project_ids, the parameter it sent.
func TestUsageRefusalNamesTheParameterSent(t *testing.T) {
	ts, _ := usageServer(t)
	for _, name := range []string{"project_ids", "project_ids[]", "tenant_ids"} {
		q := vals("start_time", unix(day0), name, "acme")
		code, _, body := ts.usagePage("/v1/organization/usage/completions", ts.keys["twotier"], q)
		e := decodeError(t, body)
		want := strings.TrimSuffix(name, "[]")
		if code != 403 || e.Error.Param == nil || *e.Error.Param != want || !strings.Contains(e.Error.Message, want) {
			t.Errorf("%s=acme with twotier's key: %d %s, want 403 naming %s", name, code, body, want)
		}
	}
}

// A value of the wrong JSON type anywhere in a request, or in a batch's body, is a 400
// naming the field and what it expects in JSON's words, never Go's types or
// encoding/json's text.
func TestTypeMismatchesSayWhatIsExpected(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	key := ts.keys["acme"]
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		path, body, param, want string
	}{
		{"/v1/chat/completions", `{"model":"tiny",` + msgs + `,"max_tokens":"5"}`, "max_tokens", "expected an integer, got a string"},
		{"/v1/chat/completions", `{"model":"tiny",` + msgs + `,"tools":{"a":1}}`, "tools", "expected an array, got an object"},
		{"/v1/chat/completions", `{"model":"tiny",` + msgs + `,"tools":[{"type":"function","function":{"name":5}}]}`, "tools[0].function.name", "expected a string, got a number"},
		{"/v1/chat/completions", `{"model":"tiny",` + msgs + `,"tool_choice":5}`, "tool_choice", "expected an object, got a number"},
		{"/v1/chat/completions", `{"model":"tiny",` + msgs + `,"response_format":"json"}`, "response_format", "expected an object, got a string"},
		{"/v1/chat/completions", `{"model":"tiny",` + msgs + `,"lmlite":{"max_cost_usd":"0.5"}}`, "lmlite.max_cost_usd", "expected a number, got a string"},
		{"/v1/chat/completions", `{"model":"tiny",` + msgs + `,"metadata":{"max_cost_usd":0.5}}`, "metadata.max_cost_usd", "metadata.max_cost_usd must be a string, not a number"},
		{"/v1/batches", `{"input_file_id":"file-x","endpoint":5,"completion_window":"24h"}`, "endpoint", "expected a string, got a number"},
		{"/v1/batches", `{"input_file_id":"file-x","endpoint":"/v1/chat/completions","completion_window":"24h","lmlite":{"max_cost_usd":"0.5"}}`, "lmlite.max_cost_usd", "expected a number, got a string"},
		{"/v1/batches", `{"input_file_id":"file-x","endpoint":"/v1/chat/completions","completion_window":"24h","bogus":1}`, "bogus", "unrecognized request argument supplied: bogus"},
		{"/v1/batches", `{"input_file_id":"file-x","Endpoint":"/v1/chat/completions","completion_window":"24h"}`, "Endpoint", "unrecognized request argument supplied: Endpoint"},
		{"/v1/batches", `[1]`, "body", "invalid type for 'body': expected an object, got an array"},
	} {
		resp, body := ts.post(c.path, key, c.body)
		e := decodeError(t, body)
		for _, leak := range []string{"Go struct", "gateway.", "struct {", "[]", "json:", "unmarshal"} {
			if strings.Contains(e.Error.Message, leak) {
				t.Errorf("%s %s: the message has Go's %q: %s", c.path, c.body, leak, e.Error.Message)
			}
		}
		if resp.StatusCode != 400 || e.Error.Param == nil || *e.Error.Param != c.param || !strings.Contains(e.Error.Message, c.want) {
			t.Errorf("%s %s: %d %s, want %s: %q", c.path, c.body, resp.StatusCode, body, c.param, c.want)
		}
	}
}
