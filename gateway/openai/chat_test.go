package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/core"
)

// dataLines are the data of an SSE byte stream's events, in order.
func dataLines(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	for _, ev := range strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n") {
		d, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(d, "\n") {
			t.Fatalf("event %q is not one data line", ev)
		}
		out = append(out, d)
	}
	return out
}

// TestChatOutputStreamsChunksFromCoreEvents: the core's events alone (no package
// gateway) render as chat.completion.chunk events naming their choice, a tool
// call's first fragment with its id and name, the finish, the usage chunk when
// include_usage asked for it, then data: [DONE].
func TestChatOutputStreamsChunksFromCoreEvents(t *testing.T) {
	m := &core.Meta{ReqID: "req_00ff", Model: "tiny", Created: 7}
	o := NewChatOutput(m, ChatOptions{Chat: true, Usage: true})
	if o.ContentType(true) != "text/event-stream" || o.ContentType(false) != "application/json" {
		t.Fatal("content types")
	}
	var b []byte
	for _, ev := range []core.Event{
		{Kind: core.EventStart},
		{Kind: core.EventText, Text: "hi \"x\"\n"},
		{Kind: core.EventCall, CallID: "call_1", Name: "f", Args: `{"a":`},
		{Kind: core.EventCall, Args: `1}`},
		{Kind: core.EventFinish, Finish: "tool_calls"},
		{Kind: core.EventUsage, Usage: engine.Usage{PromptTokens: 3, CompletionTokens: 4, CachedTokens: 2}},
	} {
		b = o.AppendEvent(b, &ev)
	}
	b = o.AppendEnd(b)
	lines := dataLines(t, b)
	if len(lines) != 7 || lines[6] != "[DONE]" {
		t.Fatalf("%d events, last %q: %s", len(lines), lines[len(lines)-1], b)
	}
	type chunk struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Index int `json:"index"`
			Delta struct {
				Role      string  `json:"role"`
				Content   *string `json:"content"`
				ToolCalls []struct {
					Index    int    `json:"index"`
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			PromptTokens        int `json:"prompt_tokens"`
			CompletionTokens    int `json:"completion_tokens"`
			TotalTokens         int `json:"total_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	var cs [6]chunk
	for i := range cs {
		if err := json.Unmarshal([]byte(lines[i]), &cs[i]); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, lines[i])
		}
		if c := cs[i]; c.ID != "chatcmpl-00ff" || c.Object != "chat.completion.chunk" || c.Created != 7 || c.Model != "tiny" {
			t.Errorf("event %d's head: %+v", i, c)
		}
	}
	if d := cs[0].Choices[0].Delta; d.Role != "assistant" {
		t.Errorf("first chunk's delta: %+v", d)
	}
	if d := cs[1].Choices[0].Delta; d.Content == nil || *d.Content != "hi \"x\"\n" {
		t.Errorf("text chunk: %s", lines[1])
	}
	if tc := cs[2].Choices[0].Delta.ToolCalls; len(tc) != 1 || tc[0].ID != "call_1" || tc[0].Function.Name != "f" || tc[0].Function.Arguments != `{"a":` {
		t.Errorf("call's first fragment: %s", lines[2])
	}
	if tc := cs[3].Choices[0].Delta.ToolCalls; len(tc) != 1 || tc[0].ID != "" || tc[0].Function.Arguments != `1}` {
		t.Errorf("call's next fragment: %s", lines[3])
	}
	if f := cs[4].Choices[0].FinishReason; f == nil || *f != "tool_calls" {
		t.Errorf("finish chunk: %s", lines[4])
	}
	if u := cs[5].Usage; len(cs[5].Choices) != 0 || u == nil || u.PromptTokens != 3 || u.CompletionTokens != 4 || u.TotalTokens != 7 || u.PromptTokensDetails.CachedTokens != 2 {
		t.Errorf("usage chunk: %s", lines[5])
	}
}

// TestChatOutputErrorEventThenDone: an error mid-stream is OpenAI's {"error": {...}}
// event (param and code null when empty), and the stream still ends with [DONE].
func TestChatOutputErrorEventThenDone(t *testing.T) {
	o := NewChatOutput(&core.Meta{ReqID: "req_1"}, ChatOptions{})
	b := o.AppendEvent(nil, &core.Event{Kind: core.EventError, Err: &core.Error{Status: 503, Type: "server_error", Message: "engine: restarting"}})
	b = o.AppendEnd(b)
	lines := dataLines(t, b)
	want := `{"error":{"message":"engine: restarting","type":"server_error","param":null,"code":null}}`
	if len(lines) != 2 || lines[0] != want || lines[1] != "[DONE]" {
		t.Fatalf("got %q, want [%s [DONE]]", lines, want)
	}
}
