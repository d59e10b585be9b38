package gateway

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/gateway/core"
	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/tenancy"
	"github.com/lmlite/lmlite/tiers"
)

// FuzzRequestBody: any body is either accepted or refused with a named field; the
// parser never panics.
func FuzzRequestBody(f *testing.F) {
	f.Add([]byte(`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stop":["a"],"stream":true,"stream_options":{"include_usage":true}}`))
	f.Add([]byte(`{"model":"auto","lmlite":{"tier_mode":"fixed","tier":"fast","max_latency_ms":10},"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`))
	f.Add([]byte("{\"model\":\"x\",\"messages\":[{\"content\":\"\xff\"}]}"))
	f.Add([]byte(`{"model":"tiny","prompt":["a"],"echo":false}`))
	f.Add([]byte(`[1,2,{"a":[{"b":"c"}]}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var c chatRequest
		if e := decodeBody(body, &c); e != nil {
			if e.param == "" || e.status != 400 {
				t.Fatalf("refusal without a field: %+v", e)
			}
		} else {
			c.Unsupported()
			c.ChatMessages()
			c.Sampling(1)
			maxTokensOf(c.MaxTokens, c.MaxCompletionTokens, "max_tokens", "max_completion_tokens")
		}
		var r completionRequest
		if decodeBody(body, &r) == nil {
			r.Unsupported()
			r.PromptText()
			r.Sampling(1)
		}
		if !utf8.Valid(body) {
			core.InvalidUTF8Field(body)
		}
	})
}

func TestInvalidUTF8Field(t *testing.T) {
	body := []byte("{\"a\": 1, \"messages\": [{\"role\": \"user\"}, {\"content\": \"x\xffy\"}], \"z\": {\"q\": [\"\xff\"]}}")
	if got := core.InvalidUTF8Field(body); got != "messages[1].content" {
		t.Errorf("invalidUTF8Field = %q", got)
	}
	body2 := []byte("{\"z\": {\"q\": [1, \"\xff\"]}}")
	if got := core.InvalidUTF8Field(body2); got != "z.q[1]" {
		t.Errorf("invalidUTF8Field = %q", got)
	}
	body3 := []byte("{\"k\xff\": 1}")
	if got := core.InvalidUTF8Field(body3); got != "" && got != "k\ufffd" {
		t.Errorf("invalidUTF8Field in a key = %q", got)
	}
}

// FuzzUpstreamStream: whatever bytes an upstream streams, relaying them never panics
// and the request is settled once.
func FuzzUpstreamStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\ndata: {\"choices\":[{\"finish_reason\":\"stop\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"usage\":{\"prompt_tokens\":\"x\"}}\n"))
	f.Add([]byte(": comment\nevent: x\ndata:\n\n"))
	f.Add([]byte(strings.Repeat("data: "+strings.Repeat("a", 70000)+"\n", 2)))
	ten := tenancy.New(nil)
	pol, _ := policies.Resolve("t", "p", policies.Plan{}, policies.Override{}, nil)
	s := &Server{pred: tiers.NewPredictor(), now: time.Now, log: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	s.metrics = newMetrics(s)
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := ten.Admit(quotaOf(&pol), time.Now(), 0)
		if err != nil {
			t.Fatal(err)
		}
		j := &job{s: s, in: input{kind: kindChat}, pol: &pol, ticket: tk, c: choice{m: &model{id: "m", upstream: &upstream{}}}, start: time.Now(), codec: chatCodec}
		resp := fasthttp.AcquireResponse()
		resp.SetBodyStream(bytes.NewReader(data), -1)
		w := bufio.NewWriter(io.Discard)
		j.streamUpstream(w, resp, time.Now())
		if ten.InFlight("t") != 0 {
			t.Fatal("not settled")
		}
	})
}

// TestDecodeBodyNamesTheField: decoding errors name the member at fault.
func TestDecodeBodyNamesTheField(t *testing.T) {
	for _, c := range []struct{ body, param, msg string }{
		{`{"model": "m", "max_tokens": "many"}`, "max_tokens", "expected an integer, got a string"},
		{`{"model": "m", "max_tokens": 1.5}`, "max_tokens", "expected an integer, got a number"},
		{`{"model": "m", "messages": [{"role": "user", "content": "x", "foo": 1}]}`, "messages[0].foo", "unrecognized request argument supplied: messages[0].foo"},
		{`{"model": "m", "messages": [{"role": 5}]}`, "messages[0].role", "expected a string, got a number"},
		{`{"model": "m", "messages": {}}`, "messages", "expected an array, got an object"},
		{`{"Model": "m"}`, "Model", "unrecognized request argument supplied: Model"},
		{`{"model": "m", "model": "n"}`, "model", "'model' is given twice"},
		{`{"model": "m"} x`, "body", "after top-level value"},
		{`[1]`, "body", "expected an object, got an array"},
	} {
		var r chatRequest
		e := decodeBody([]byte(c.body), &r)
		if e == nil || e.param != c.param || !strings.Contains(e.message, c.msg) {
			t.Errorf("%s: %+v, want param %q and %q", c.body, e, c.param, c.msg)
		}
	}
}

// BenchmarkDecodeBody: a typical small chat request.
func BenchmarkDecodeBody(b *testing.B) {
	body := []byte(`{"model":"auto","messages":[{"role":"user","content":"Say hello to the benchmark."}],"max_tokens":1}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var r chatRequest
		if e := decodeBody(body, &r); e != nil {
			b.Fatal(e)
		}
	}
}
