package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/tenancy"
	"github.com/lmlite/lmlite/tiers"
)

// FuzzAppendJSONString: the output is valid JSON that decodes to the input (with
// invalid UTF-8 replaced by U+FFFD, as encoding/json does).
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "hello", "a\"b\\c", "\n\t\r\x00\x1f", "é中😀", "\xff\xfe", "\u2028\u2029", "<script>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q -> %s: %v", s, b, err)
		}
		want := s
		if !utf8.ValidString(s) {
			want = string([]rune(s)) // replaces each invalid byte by U+FFFD
		}
		if got != want {
			t.Fatalf("%q -> %s -> %q", s, b, got)
		}
	})
}

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
			c.unsupported()
			c.messages()
			c.sampling(1)
			maxTokensOf(c.MaxTokens, c.MaxCompletionTokens, "max_tokens", "max_completion_tokens")
		}
		var r completionRequest
		if decodeBody(body, &r) == nil {
			r.unsupported()
			r.promptText()
			r.sampling(1)
		}
		if !utf8.Valid(body) {
			fieldAt(body, invalidUTF8Offset(body))
		}
	})
}

func TestFieldAt(t *testing.T) {
	body := []byte("{\"a\": 1, \"messages\": [{\"role\": \"user\"}, {\"content\": \"x\xffy\"}], \"z\": {\"q\": [\"\xff\"]}}")
	if got := fieldAt(body, invalidUTF8Offset(body)); got != "messages[1].content" {
		t.Errorf("fieldAt = %q", got)
	}
	body2 := []byte("{\"z\": {\"q\": [1, \"\xff\"]}}")
	if got := fieldAt(body2, invalidUTF8Offset(body2)); got != "z.q[1]" {
		t.Errorf("fieldAt = %q", got)
	}
	body3 := []byte("{\"k\xff\": 1}")
	if got := fieldAt(body3, invalidUTF8Offset(body3)); got != "" && got != "k\ufffd" {
		t.Errorf("fieldAt in a key = %q", got)
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
		tk, err := ten.Admit(&pol, time.Now(), 0)
		if err != nil {
			t.Fatal(err)
		}
		j := &job{s: s, kind: kindChat, pol: &pol, ticket: tk, m: &model{id: "m", upstream: &upstream{}}, start: time.Now()}
		resp := fasthttp.AcquireResponse()
		resp.SetBodyStream(bytes.NewReader(data), -1)
		w := bufio.NewWriter(io.Discard)
		j.streamUpstream(w, resp, time.Now())
		if ten.InFlight("t") != 0 {
			t.Fatal("not settled")
		}
	})
}
