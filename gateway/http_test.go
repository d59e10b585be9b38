package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go"

	"github.com/lmlite/lmlite/money"
)

type errBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func parseErr(t *testing.T, body string) errBody {
	t.Helper()
	var e errBody
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an OpenAI error: %q", body)
	}
	return e
}

func TestBadRequestsNameTheField(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	key := ts.keys["acme"]
	cases := []struct {
		name, path, body, param string
	}{
		{"bad JSON", "/v1/chat/completions", `{"model": "tiny", "messages": [`, "body"},
		{"not JSON", "/v1/chat/completions", `hello`, "body"},
		{"empty", "/v1/chat/completions", ``, "body"},
		{"wrong type", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "max_tokens": "many"}`, "max_tokens"},
		{"invalid UTF-8", "/v1/chat/completions", "{\"model\": \"tiny\", \"messages\": [{\"role\":\"user\",\"content\":\"ok\"}, {\"role\":\"user\",\"content\":\"bad \xff here\"}]}", "messages[1].content"},
		{"invalid UTF-8 prompt", "/v1/completions", "{\"model\": \"tiny\", \"prompt\": \"\xc3\x28\"}", "prompt"},
		{"unknown field", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "frobnicate": true}`, "frobnicate"},
		{"completions with messages", "/v1/completions", `{"model": "tiny", "messages": []}`, "messages"},
		{"echo with logprobs, engine without logprobs", "/v1/completions", `{"model": "tiny", "prompt": "x", "echo": true, "logprobs": 1}`, "logprobs"},
		{"best_of", "/v1/completions", `{"model": "tiny", "prompt": "x", "best_of": 2}`, "best_of"},
		{"n over 8", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "n": 9}`, "n"},
		{"top_logprobs over 20", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "logprobs": true, "top_logprobs": 21}`, "top_logprobs"},
		{"tool_choice without tools", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "tool_choice": "required"}`, "tool_choice"},
		{"tool_choice unknown function", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "tools": [{"type":"function","function":{"name":"f"}}], "tool_choice": {"type":"function","function":{"name":"g"}}}`, "tool_choice"},
		{"response_format type", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "response_format": {"type": "yaml"}}`, "response_format.type"},
		{"json_schema without name", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}`, "response_format.json_schema.name"},
		{"prompt tokens", "/v1/completions", `{"model": "tiny", "prompt": [1,2,3]}`, "prompt"},
		{"image content", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, "messages[0].content[0].type"},
		{"tool role without tool_call_id", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role":"tool","content":"x"}]}`, "messages[0].tool_call_id"},
		{"function role without name", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role":"function","content":"x"}]}`, "messages[0].name"},
		{"stream_options without stream", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "stream_options": {"include_usage": true}}`, "stream_options"},
		{"max_tokens 0", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "max_tokens": 0}`, "max_tokens"},
		{"response_format json", "/v1/chat/completions", `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "response_format": {"type": "json_object"}}`, "response_format"},
		{"bad latency header", "/v1/chat/completions", `{"model": "auto", "messages": [{"role":"user","content":"x"}]}`, "X-LMLite-Max-Latency-Ms"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := ts.post(c.path, key, c.body, "X-LMLite-Max-Latency-Ms", map[bool]string{true: "soon", false: "100000"}[c.name == "bad latency header"])
			if resp.StatusCode != 400 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			e := parseErr(t, body)
			if e.Error.Param == nil || *e.Error.Param != c.param || e.Error.Type != "invalid_request_error" {
				t.Errorf("param %v, want %q: %s", e.Error.Param, c.param, body)
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id")
			}
		})
	}
	// Well-formed parameters the server accepts with their default meaning pass.
	resp, body := ts.post("/v1/chat/completions", key, `{"model": "tiny", "messages": [{"role":"developer","content":[{"type":"text","text":"x"}]}], "n": 1, "max_tokens": 2, "tool_choice": "none", "response_format": {"type":"text"}, "user": "u1", "logprobs": false}`)
	if resp.StatusCode != 200 {
		t.Errorf("defaults refused: %d %s", resp.StatusCode, body)
	}
	// Every request above was admitted before its body was decoded (concurrency,
	// requests/s), so each reached the ledger: the refused ones as 400s at no cost.
	led := ts.ledger()
	if len(led) != len(cases)+1 {
		t.Errorf("%d ledger entries, want %d", len(led), len(cases)+1)
	}
	for _, e := range led {
		if e.Status != 200 && (e.Status != 400 || e.Cost != 0) {
			t.Errorf("a refused request's entry: status %d, cost %v", e.Status, e.Cost)
		}
	}
}

func TestAuthAndIDs(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	body := `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "max_tokens": 1}`
	for _, key := range []string{"", "sk-openai-style", ts.keys["acme"] + "x"} {
		resp, b := ts.post("/v1/chat/completions", key, body)
		if e := parseErr(t, b); resp.StatusCode != 401 || e.Error.Code == nil || *e.Error.Code != "invalid_api_key" {
			t.Errorf("key %q: %d %s", key, resp.StatusCode, b)
		}
	}
	resp, _ := ts.post("/v1/chat/completions", ts.keys["acme"], body)
	id := resp.Header.Get("X-Request-Id")
	if resp.StatusCode != 200 || !strings.HasPrefix(id, "req_") || len(id) != 20 {
		t.Errorf("generated request id %q", id)
	}
	resp2, _ := ts.post("/v1/chat/completions", ts.keys["acme"], body)
	if resp2.Header.Get("X-Request-Id") == id {
		t.Error("request ids repeat")
	}
	if led := ts.ledger(); len(led) != 2 || led[0].RequestID != id {
		t.Errorf("ledger %+v", led)
	}
	resp, _ = ts.get("/v1/chat/completions", ts.keys["acme"])
	if resp.StatusCode != 405 {
		t.Errorf("GET: %d", resp.StatusCode)
	}
	resp, _ = ts.get("/nope", "")
	if resp.StatusCode != 404 || resp.Header.Get("X-Request-Id") == "" {
		t.Errorf("404: %d", resp.StatusCode)
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	eng := newFakeEngine()
	ts := startServer(t, testConfig, eng)
	if resp, _ := ts.get("/healthz", ""); resp.StatusCode != 200 {
		t.Errorf("healthz %d", resp.StatusCode)
	}
	if resp, _ := ts.get("/readyz", ""); resp.StatusCode != 200 {
		t.Errorf("readyz %d", resp.StatusCode)
	}
	eng.ready.Store(false)
	if resp, _ := ts.get("/readyz", ""); resp.StatusCode != 503 {
		t.Errorf("readyz not ready: %d", resp.StatusCode)
	}
	ts.post("/v1/chat/completions", ts.keys["acme"], `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "max_tokens": 3}`)
	ts.post("/v1/chat/completions", ts.keys["broke"], `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "max_tokens": 3}`)
	_, m := ts.get("/metrics", "")
	for _, want := range []string{
		`lmlite_requests_total{model="tiny",status="200",tenant="acme",tier="fast"} 1`,
		`lmlite_rejections_total{reason="budget"} 1`,
		`lmlite_model_state{model="tiny",state="ready"} 1`,
		`lmlite_model_memory_bytes{model="big"} 4.194304e+06`,
		`lmlite_time_to_first_token_seconds_count{model="tiny"} 1`,
		`lmlite_time_per_output_token_seconds_count{model="tiny"} 1`,
		`lmlite_request_duration_seconds_count{model="tiny"} 1`,
		`lmlite_spend_usd_total{model="tiny",tenant="acme"}`,
		`lmlite_queue_depth{model="tiny"} 0`,
		`lmlite_tokens_total{kind="completion",model="tiny"} 3`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestTierRouting(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	msg := `"messages": [{"role":"user","content":"x"}], "max_tokens": 2`
	cases := []struct {
		name, tenant, body string
		hdr                []string
		tier, model        string
	}{
		{"auto is the plan's default (balanced)", "acme", `{"model": "auto", ` + msg + `}`, nil, "balanced", "tiny"},
		{"auto is the plan's default (deep)", "deep", `{"model": "auto", ` + msg + `}`, nil, "deep", "big"},
		{"tier:max is fixed", "acme", `{"model": "tier:max", ` + msg + `}`, nil, "max", "big"},
		{"body mode", "acme", `{"model": "auto", "lmlite": {"tier_mode": "max"}, ` + msg + `}`, nil, "max", "big"},
		{"header mode", "acme", `{"model": "auto", ` + msg + `}`, []string{"X-LMLite-Tier-Mode", "deep"}, "deep", "big"},
		{"header fixed tier", "acme", `{"model": "auto", ` + msg + `}`, []string{"X-LMLite-Tier-Mode", "fixed", "X-LMLite-Tier", "fast"}, "fast", "tiny"},
		{"cost steps down", "acme", `{"model": "auto", "lmlite": {"tier_mode": "max", "max_cost_usd": 0.0001}, ` + msg + `}`, nil, "balanced", "tiny"},
		{"header cost steps down", "acme", `{"model": "auto", ` + msg + `}`, []string{"X-LMLite-Tier-Mode", "max", "X-LMLite-Max-Cost-USD", "0.0001"}, "balanced", "tiny"},
		{"model default is auto", "deep", `{"model": "default", ` + msg + `}`, nil, "deep", "big"},
		{"tier fields override a model name", "acme", `{"model": "whatever", ` + msg + `}`, []string{"X-LMLite-Tier", "max"}, "max", "big"},
		{"exact worst case over the budget steps down", "thin", `{"model": "auto", "lmlite": {"tier_mode": "max"}, "messages": [{"role":"user","content":"x"}], "max_tokens": 10}`, nil, "balanced", "tiny"},
		{"policy steps down", "small", `{"model": "auto", "lmlite": {"tier_mode": "max"}, ` + msg + `}`, nil, "balanced", "tiny"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := ts.post("/v1/chat/completions", ts.keys[c.tenant], c.body, c.hdr...)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if resp.Header.Get("X-LMLite-Tier") != c.tier || resp.Header.Get("X-LMLite-Model") != c.model {
				t.Errorf("served by %s/%s, want %s/%s", resp.Header.Get("X-LMLite-Tier"), resp.Header.Get("X-LMLite-Model"), c.tier, c.model)
			}
		})
	}
	// Load: with big's queue full, max steps down to balanced.
	for i := 0; i < 128; i++ {
		ts.srv.pred.Begin("big")
	}
	resp, _ := ts.post("/v1/chat/completions", ts.keys["acme"], `{"model": "auto", "lmlite": {"tier_mode": "max"}, `+msg+`}`)
	if resp.Header.Get("X-LMLite-Tier") != "balanced" {
		t.Errorf("under load: tier %q", resp.Header.Get("X-LMLite-Tier"))
	}
	// ...and fixed refuses with 503.
	resp, body := ts.post("/v1/chat/completions", ts.keys["acme"], `{"model": "tier:max", `+msg+`}`)
	if resp.StatusCode != 503 || !strings.Contains(body, "overloaded") || resp.Header.Get("Retry-After") == "" {
		t.Errorf("fixed under load: %d %s", resp.StatusCode, body)
	}
	if led := ts.ledger(); led[0].Tier != "balanced" || led[0].Model != "tiny" {
		t.Errorf("ledger tier %+v", led[0])
	}
}

// TestPredictorLearnsServiceTime: the engine's time to first token includes the time a
// request queued; the router's predictor must learn the service time without it, as
// it adds the queue ahead itself from the queue depth, else a queue once seen is
// counted twice (found reading the mixed-tiers load test's latency refusals).
func TestPredictorLearnsServiceTime(t *testing.T) {
	eng := newFakeEngine()
	eng.Queue = 300 * time.Millisecond
	ts := startServer(t, testConfig, eng)
	for _, stream := range []string{"false", "true"} {
		resp, body := ts.post("/v1/chat/completions", ts.keys["acme"],
			`{"model": "tier:fast", "stream": `+stream+`, "messages": [{"role":"user","content":"x"}], "max_tokens": 3}`)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		st := ts.srv.pred.Stats("tiny", ts.srv.now())
		if st.TTFT <= 0 || st.TTFT >= eng.Queue/2 {
			t.Errorf("stream %s: predicted TTFT %v; want the service time, without the %v queued", stream, st.TTFT, eng.Queue)
		}
	}
}

// TestBudgetUnderConcurrency fires 200 concurrent requests at a tenant whose budget
// covers about 50 of them: settled spend never exceeds the ceiling, and every request
// either ran or got the budget error.
func TestBudgetUnderConcurrency(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	// big: a 55-token prompt at $0.01/1K plus 15 output tokens at $0.03/1K is $0.001 a
	// request (worst case = actual: the fake engine produces all 15), so $0.05 covers 50.
	body := `{"model": "big", "messages": [{"role":"user","content":"spend"}], "max_tokens": 15}`
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, quota, other := 0, 0, []string{}
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, b := ts.post("/v1/chat/completions", ts.keys["race"], body)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case resp.StatusCode == 200:
				ok++
			case resp.StatusCode == 429 && strings.Contains(b, `"code":"insufficient_quota"`):
				quota++
			default:
				other = append(other, fmt.Sprintf("%d %s", resp.StatusCode, b))
			}
		}()
	}
	wg.Wait()
	var spent money.Money
	ran := 0
	for _, e := range ts.ledger() {
		spent += e.Cost
		if e.Status == 200 {
			ran++
		}
	}
	day, _, _ := ts.store.Spent("race", time.Now())
	t.Logf("ran %d, refused %d, spent %v of $0.05", ok, quota, spent)
	if len(other) > 0 {
		t.Errorf("%d requests neither ran nor got the budget error: %v", len(other), other[:1])
	}
	if ok+quota != 200 || ran != ok {
		t.Errorf("ok %d + quota %d != 200 (ledger ran %d)", ok, quota, ran)
	}
	if spent > money.USD(0.05) || day != spent {
		t.Errorf("spent %v (store %v), ceiling $0.05", spent, day)
	}
	if ok < 30 || ok > 80 {
		t.Errorf("%d ran; the budget covers about 50", ok)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	eng := newFakeEngine()
	eng.Delay = 20 * time.Millisecond
	ts := startServer(t, testConfig, eng)
	done := make(chan struct{})
	go func() {
		ts.post("/v1/chat/completions", ts.keys["one"], `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "max_tokens": 10}`)
		close(done)
	}()
	for eng.started.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	resp, body := ts.post("/v1/chat/completions", ts.keys["one"], `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "max_tokens": 1}`)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "concurrency") {
		t.Errorf("second concurrent request: %d %s", resp.StatusCode, body)
	}
	<-done
}

// TestDisconnectCancels: a client that goes away mid-generation cancels it, streamed
// or not, and the ledger records what was used with status 499.
func TestDisconnectCancels(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			eng := newFakeEngine()
			eng.Delay = 10 * time.Millisecond
			ts := startServer(t, testConfig, eng)
			conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			body := fmt.Sprintf(`{"model": "tiny", "messages": [{"role":"user","content":"x"}], "max_tokens": 400, "stream": %v}`, stream)
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
				ts.keys["acme"], len(body), body)
			if stream {
				rd := bufio.NewReader(conn)
				for { // wait for the first token
					line, err := rd.ReadString('\n')
					if err != nil {
						t.Fatal(err)
					}
					if strings.Contains(line, `"content":"w0 "`) {
						break
					}
				}
			} else {
				for eng.started.Load() == 0 {
					time.Sleep(time.Millisecond)
				}
				time.Sleep(30 * time.Millisecond)
			}
			conn.Close()
			deadline := time.Now().Add(5 * time.Second)
			for eng.cancels.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if eng.cancels.Load() != 1 {
				t.Fatal("generation not cancelled after the client left")
			}
			var led []string
			for time.Now().Before(deadline) {
				es := ts.ledger()
				if len(es) == 1 {
					if es[0].Status != 499 || es[0].CompletionTokens >= 400 || es[0].CompletionTokens == 0 {
						t.Errorf("ledger %+v", es[0])
					}
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
			t.Fatalf("ledger %v", led)
		})
	}
}

// TestDrain: on Shutdown new requests are refused while an in-flight stream finishes
// and settles.
func TestDrain(t *testing.T) {
	eng := newFakeEngine()
	eng.Delay = 5 * time.Millisecond
	ts := startServer(t, testConfig, eng)
	c := ts.client("acme")
	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}, MaxTokens: openai.Int(60),
	})
	if !stream.Next() {
		t.Fatal(stream.Err())
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- ts.srv.Shutdown(ctx)
	}()
	for !ts.srv.draining.Load() {
		time.Sleep(time.Millisecond)
	}
	var text strings.Builder
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("in-flight stream broken by the drain: %v", err)
	}
	if !strings.HasSuffix(text.String(), "w59 ") {
		t.Errorf("stream cut short: ...%q", text.String()[max(0, text.Len()-20):])
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if led := ts.ledger(); len(led) != 1 || led[0].CompletionTokens != 60 || led[0].Status != 200 {
		t.Errorf("ledger %+v", led)
	}
	// The listener is closed: new requests cannot get in.
	_, err := http.Get(ts.url + "/healthz")
	if err == nil {
		t.Error("server still accepting after the drain")
	}
}

func TestAdminAPI(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	do := func(method, path, key, body string) (int, string) {
		req, _ := http.NewRequest(method, ts.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var sb strings.Builder
		bufio.NewReader(resp.Body).WriteTo(&sb)
		return resp.StatusCode, sb.String()
	}
	if st, _ := do("GET", "/admin/models", "wrong", ""); st != 401 {
		t.Errorf("wrong admin key: %d", st)
	}
	if st, _ := do("GET", "/admin/models", ts.keys["acme"], ""); st != 401 {
		t.Errorf("tenant key on admin: %d", st)
	}
	st, body := do("GET", "/admin/models", "admin-secret", "")
	if st != 200 || !strings.Contains(body, `"id":"big"`) || !strings.Contains(body, `"memory_bytes":4194304`) || !strings.Contains(body, `"state":"ready"`) {
		t.Errorf("models: %d %s", st, body)
	}
	if st, _ := do("POST", "/admin/models/tiny/unload", "admin-secret", ""); st != 501 {
		t.Errorf("unload without a loader: %d", st)
	}
	st, body = do("POST", "/admin/keys", "admin-secret", `{"tenant": "acme"}`)
	var created struct{ Key, ID string }
	json.Unmarshal([]byte(body), &created)
	if st != 200 || !strings.HasPrefix(created.Key, "lml_"+created.ID+"_") {
		t.Fatalf("create: %d %s", st, body)
	}
	if st, _ := do("POST", "/admin/keys", "admin-secret", `{"tenant": "ghost"}`); st != 400 {
		t.Errorf("unknown tenant: %d", st)
	}
	req := `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "max_tokens": 1}`
	if resp, _ := ts.post("/v1/chat/completions", created.Key, req); resp.StatusCode != 200 {
		t.Errorf("new key: %d", resp.StatusCode)
	}
	st, body = do("GET", "/admin/keys", "admin-secret", "")
	if st != 200 || !strings.Contains(body, created.ID) || strings.Contains(body, created.Key) || strings.Contains(body, `"hash"`) {
		t.Errorf("list: %d %s", st, body)
	}
	if st, _ := do("DELETE", "/admin/keys/"+created.ID, "admin-secret", ""); st != 200 {
		t.Errorf("revoke: %d", st)
	}
	if resp, _ := ts.post("/v1/chat/completions", created.Key, req); resp.StatusCode != 401 {
		t.Errorf("revoked key: %d", resp.StatusCode)
	}
	st, body = do("GET", "/admin/usage?tenant=acme", "admin-secret", "")
	if st != 200 || !strings.Contains(body, `"spent_today_usd":`) {
		t.Errorf("usage: %d %s", st, body)
	}
	_ = errors.New
}

// TestRouterUsesTheEnginesQueueLimit: an embedded model's queue limit is the one the
// engine reports (ModelStatus.MaxQueue), not a second number of the gateway's: with
// the engine's limit at 3, a named model with 3 requests in flight is a 503
// overloaded although the config's max_queue would allow far more.
func TestRouterUsesTheEnginesQueueLimit(t *testing.T) {
	eng := newFakeEngine()
	eng.MaxQueue = 3
	ts := startServer(t, testConfig, eng)
	defer ts.stop()
	msg := `"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2`
	for i := 0; i < 2; i++ {
		ts.srv.pred.Begin("big")
	}
	if resp, body := ts.post("/v1/chat/completions", ts.keys["acme"], `{"model": "big", `+msg+`}`); resp.StatusCode != 200 {
		t.Fatalf("below the engine's limit: %d %s", resp.StatusCode, body)
	}
	ts.srv.pred.Begin("big")
	resp, body := ts.post("/v1/chat/completions", ts.keys["acme"], `{"model": "big", `+msg+`}`)
	if resp.StatusCode != 503 || !strings.Contains(body, "overloaded") {
		t.Fatalf("at the engine's limit of 3: %d %s, want 503 overloaded", resp.StatusCode, body)
	}
}
