package anthropic

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine"
)

// events splits a stream into its events' names and data.
func events(t *testing.T, s string) (names []string, data []map[string]any) {
	t.Helper()
	for ev := range strings.SplitSeq(strings.TrimSuffix(s, "\n\n"), "\n\n") {
		name, rest, ok := strings.Cut(ev, "\n")
		d, ok2 := strings.CutPrefix(rest, "data: ")
		if !ok || !ok2 || !strings.HasPrefix(name, "event: ") {
			t.Fatalf("not one event line and one data line: %q", ev)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("data %q: %v", d, err)
		}
		if m["type"] != strings.TrimPrefix(name, "event: ") {
			t.Fatalf("event %q with data of type %v", name, m["type"])
		}
		names, data = append(names, strings.TrimPrefix(name, "event: ")), append(data, m)
	}
	return names, data
}

// TestStreamSequence: text, then a tool call, then the end give Anthropic's event
// sequence: blocks opened, filled and closed in order with their indexes, a
// message_delta with tool_use and the usage, then message_stop.
func TestStreamSequence(t *testing.T) {
	var st Stream
	b := st.Start(nil, MessageID("req_ab"), "m", 7)
	b = st.Text(b, "Hi")
	b = st.Text(b, "")
	b = st.ToolUse(b, "call_1", "get")
	b = st.ToolInput(b, `{"a":`)
	b = st.ToolInput(b, `1}`)
	b = st.Finish(b, "tool_calls")
	b = st.Delta(b, engine.Usage{PromptTokens: 7, CachedTokens: 3, CompletionTokens: 5})
	b = st.End(b)
	names, data := events(t, string(b))
	want := []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("events %v, want %v", names, want)
	}
	if data[4]["index"] != 1.0 || data[4]["content_block"].(map[string]any)["id"] != "toolu_1" {
		t.Errorf("the tool_use block: %v", data[4])
	}
	d := data[8]
	if d["delta"].(map[string]any)["stop_reason"] != "tool_use" || d["usage"].(map[string]any)["input_tokens"] != 4.0 ||
		d["usage"].(map[string]any)["cache_read_input_tokens"] != 3.0 {
		t.Errorf("message_delta: %v", d)
	}
}

// TestStreamEmptyAndError: an answer with nothing written still has one (empty)
// text block; after an error event nothing more is written, not even message_stop.
func TestStreamEmptyAndError(t *testing.T) {
	var st Stream
	b := st.Finish(st.Start(nil, "msg_x", "m", 1), "stop")
	names, _ := events(t, string(b))
	if strings.Join(names, ",") != "message_start,content_block_start,content_block_stop" {
		t.Errorf("empty answer: %v", names)
	}
	var e Stream
	b = e.Text(e.Start(nil, "msg_x", "m", 1), "a")
	b = e.Error(b, ErrorType(503, "overloaded"), "busy")
	n := len(b)
	b = e.End(e.Delta(e.Text(b, "more"), engine.Usage{}))
	if len(b) != n || !e.Errored() {
		t.Fatalf("wrote after the error event: %q", b[n:])
	}
	names, data := events(t, string(b))
	last := data[len(data)-1]["error"].(map[string]any)
	if names[len(names)-1] != "error" || last["type"] != "overloaded_error" || last["message"] != "busy" {
		t.Errorf("the error event: %v %v", names, last)
	}
}

// TestErrorTypeAndStatus: Anthropic's error type for each status, and 529 for an
// overloaded engine or server only.
func TestErrorTypeAndStatus(t *testing.T) {
	for _, c := range []struct {
		status     int
		code, typ  string
		wantStatus int
	}{
		{400, "", "invalid_request_error", 400},
		{401, "invalid_api_key", "authentication_error", 401},
		{403, "", "permission_error", 403},
		{404, "model_not_found", "not_found_error", 404},
		{413, "", "request_too_large", 413},
		{429, "rate_limit_exceeded", "rate_limit_error", 429},
		{500, "", "api_error", 500},
		{502, "node_lost", "api_error", 502},
		{503, "engine_restarting", "api_error", 503},
		{503, "overloaded", "overloaded_error", 529},
		{503, "shutting_down", "overloaded_error", 529},
	} {
		if got := ErrorType(c.status, c.code); got != c.typ {
			t.Errorf("%d %s: type %s, want %s", c.status, c.code, got, c.typ)
		}
		if got := Status(c.status, c.code); got != c.wantStatus {
			t.Errorf("%d %s: status %d, want %d", c.status, c.code, got, c.wantStatus)
		}
	}
}
