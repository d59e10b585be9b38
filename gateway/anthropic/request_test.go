package anthropic

import (
	"reflect"
	"testing"

	"github.com/lmlite/lmlite/engine"
)

// TestDecodeConversation: a Messages body becomes the chat template's messages on
// its own, without the gateway: system blocks joined, tool_result blocks messages
// with role "tool" in their place (is_error prefixed), tool_use blocks the
// assistant's tool calls, thinking dropped.
func TestDecodeConversation(t *testing.T) {
	body := `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"a"},{"type":"text","text":"b"}],
	"messages":[
	 {"role":"user","content":"hi"},
	 {"role":"assistant","content":[{"type":"thinking","thinking":"x","signature":"s"},{"type":"text","text":"t"},{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}}]},
	 {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"bad","is_error":true},{"type":"text","text":"go"}]}],
	"stop_sequences":["","END"],"lmlite":{"tier":"fast","seed":7}}`
	r, ferr := Decode([]byte(body))
	if ferr != nil {
		t.Fatal(ferr)
	}
	if ferr := r.Check(false); ferr != nil {
		t.Fatal(ferr)
	}
	msgs, size, ferr := r.Conversation()
	if ferr != nil {
		t.Fatal(ferr)
	}
	want := []engine.Message{
		{Role: "system", Content: "a\n\nb"},
		{Role: "user", Content: "hi"},
		{Role: "assistant", Content: "t", ToolCalls: []engine.ToolCall{{ID: "toolu_1", Name: "f", Arguments: `{"a":1}`}}},
		{Role: "tool", Content: "Error: bad", ToolCallID: "toolu_1"},
		{Role: "user", Content: "go"},
	}
	if !reflect.DeepEqual(msgs, want) || size == 0 {
		t.Fatalf("Conversation = %+v (%d bytes), want %+v", msgs, size, want)
	}
	if got := r.Stops(); !reflect.DeepEqual(got, []string{"END"}) {
		t.Fatalf("Stops = %q", got)
	}
	if r.LMLite == nil || r.LMLite.Tier != "fast" || r.LMLite.Seed == nil || *r.LMLite.Seed != 7 {
		t.Fatalf("lmlite = %+v", r.LMLite)
	}
}

// TestDecodeErrorsNameTheField: what the server refuses is named in this API's
// fields.
func TestDecodeErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ body, param string }{
		{`{"model":"m","max_tokens":5,"messages":[],"bogus":1}`, "bogus"},
		{`{"model":"m","messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{`{"model":"m","max_tokens":5,"temperature":1.5,"messages":[{"role":"user","content":"x"}]}`, "temperature"},
		{`{"model":"m","max_tokens":5,"thinking":{"type":"enabled","budget_tokens":10},"messages":[{"role":"user","content":"x"}]}`, "thinking.budget_tokens"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, "messages[0].content[0]"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}]}`, "messages[1].role"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"web_search_20250305","name":"w"}]}`, "tools[0].type"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"tool"}}`, "tool_choice.name"},
	} {
		r, ferr := Decode([]byte(tc.body))
		if ferr == nil {
			if ferr = r.Check(false); ferr == nil {
				if _, _, ferr = r.Conversation(); ferr == nil {
					_, ferr = r.ChatFeatures()
				}
			}
		}
		if ferr == nil || ferr.Param != tc.param {
			t.Errorf("%s: error %v, want one naming %q", tc.body, ferr, tc.param)
		}
	}
	// count_tokens needs no max_tokens.
	r, _ := Decode([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
	if ferr := r.Check(true); ferr != nil {
		t.Errorf("count_tokens without max_tokens: %v", ferr)
	}
}

// TestChatFeaturesAndRename: tools, tool_choice and output_config become the chat
// request's members, and the chat decoder's field names come back as this API's.
func TestChatFeaturesAndRename(t *testing.T) {
	r, ferr := Decode([]byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],
	"tools":[{"name":"f","description":"d","input_schema":{"type":"object"},"strict":true}],
	"tool_choice":{"type":"any","disable_parallel_tool_use":true},
	"output_config":{"format":{"type":"json_schema","schema":{"type":"object"}}}}`))
	if ferr != nil {
		t.Fatal(ferr)
	}
	cf, ferr := r.ChatFeatures()
	if ferr != nil {
		t.Fatal(ferr)
	}
	if got := string(cf.Tools); got != `[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"},"strict":true}}]` {
		t.Errorf("tools = %s", got)
	}
	if string(cf.ToolChoice) != `"required"` || cf.ParallelToolCalls == nil || *cf.ParallelToolCalls {
		t.Errorf("tool_choice = %s, parallel = %v", cf.ToolChoice, cf.ParallelToolCalls)
	}
	if got := string(cf.ResponseFormat); got != `{"type":"json_schema","json_schema":{"name":"output","strict":true,"schema":{"type":"object"}}}` {
		t.Errorf("response_format = %s", got)
	}
	for _, tc := range []struct{ param, want string }{
		{"tools[2].function.parameters.properties", "tools[2].input_schema.properties"},
		{"tools[0].function.name", "tools[0].name"},
		{"response_format.json_schema.schema", "output_config.format.schema"},
		{"temperature", "temperature"},
	} {
		p, msg := Rename(tc.param, "bad "+tc.param)
		if p != tc.want || msg != "bad "+tc.want {
			t.Errorf("Rename(%q) = %q, %q", tc.param, p, msg)
		}
	}
	if got := string(AppendCountTokens(nil, 12)); got != `{"input_tokens":12}` {
		t.Errorf("count_tokens' answer = %s", got)
	}
	if got := string(APIKey(nil, []byte("Bearer k1"))); got != "k1" {
		t.Errorf("APIKey from Authorization = %q", got)
	}
	if got := string(APIKey([]byte("k2"), []byte("Bearer k1"))); got != "k2" {
		t.Errorf("APIKey prefers x-api-key: %q", got)
	}
}
