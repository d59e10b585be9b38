package openai

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine"
)

// TestParseInputToMessages: Responses input items decode strictly on their own and
// become the chat template's messages: instructions a system message, developer a
// system message, a function_call joining the assistant message before it, its
// output a tool message.
func TestParseInputToMessages(t *testing.T) {
	items, ferr := ParseInput([]byte(`[
	 {"role":"developer","content":"be brief"},
	 {"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
	 {"type":"message","role":"assistant","content":[{"type":"output_text","text":"c","annotations":[]}]},
	 {"type":"function_call","call_id":"call_1","name":"f","arguments":"{}"},
	 {"type":"function_call_output","call_id":"call_1","output":"42"}]`))
	if ferr != nil {
		t.Fatal(ferr)
	}
	instr := "sys"
	msgs, size := Messages(&instr, items)
	want := []engine.Message{
		{Role: "system", Content: "sys"},
		{Role: "system", Content: "be brief"},
		{Role: "user", Content: "ab"},
		{Role: "assistant", Content: "c", ToolCalls: []engine.ToolCall{{ID: "call_1", Name: "f", Arguments: "{}"}}},
		{Role: "tool", Content: "42", ToolCallID: "call_1"},
	}
	if !reflect.DeepEqual(msgs, want) || size == 0 {
		t.Fatalf("Messages = %+v (%d bytes), want %+v", msgs, size, want)
	}
	if one, _ := ParseInput([]byte(`"hi"`)); len(one) != 1 || one[0] != (Item{Type: "message", Role: "user", Text: "hi"}) {
		t.Fatalf("a string input = %+v", one)
	}
}

// TestParseInputRefusesByName: what the server cannot serve, or a shape the API
// does not have, is an error naming the field.
func TestParseInputRefusesByName(t *testing.T) {
	for _, tc := range []struct{ in, param string }{
		{`[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]`, "input[0].content[0].type"},
		{`[{"type":"web_search_call","id":"w"}]`, "input[0].type"},
		{`[{"role":"robot","content":"x"}]`, "input[0].role"},
		{`[{"type":"function_call","name":"f","arguments":"{}"}]`, "input[0].call_id"},
		{`[{"role":"user","content":"x","bogus":1}]`, "input[0].bogus"},
		{`[1]`, "input[0]"},
		{`{}`, "input"},
		{"[" + strings.Repeat(`"x",`, MaxItems) + `"x"]`, "input"},
	} {
		_, ferr := ParseInput([]byte(tc.in))
		if ferr == nil || ferr.Param != tc.param {
			t.Errorf("%.60s: error %v, want one naming %q", tc.in, ferr, tc.param)
		}
	}
	_, ferr := ParseInput([]byte("[" + strings.Repeat(`"x",`, MaxItems) + `"x"]`))
	if ferr == nil || !strings.Contains(ferr.Message, strconv.Itoa(MaxItems)) {
		t.Errorf("too many items: %v", ferr)
	}
}

// TestRenameResponses: an error about the request in chat's shape names the
// Responses API's fields, in its parameter and its message.
func TestRenameResponses(t *testing.T) {
	for _, tc := range []struct{ param, msg, wantP, wantMsg string }{
		{"response_format.json_schema.schema", "bad 'response_format.json_schema.schema'", "text.format.schema", "bad 'text.format.schema'"},
		{"tools[1].function.parameters", "bad 'tools[1].function.parameters'", "tools[1].parameters", "bad 'tools[1].parameters'"},
		{"tool_choice.function.name", "x", "tool_choice.name", "x"},
		{"max_tokens", "'max_tokens' too big", "max_output_tokens", "'max_output_tokens' too big"},
		{"messages", "too long", "input", "too long"},
	} {
		p, msg, changed := RenameResponses(tc.param, tc.msg)
		if p != tc.wantP || msg != tc.wantMsg || !changed {
			t.Errorf("RenameResponses(%q, %q) = %q, %q, %v", tc.param, tc.msg, p, msg, changed)
		}
	}
	if p, msg, changed := RenameResponses("temperature", "bad"); changed || p != "temperature" || msg != "bad" {
		t.Errorf("temperature renamed: %q %q", p, msg)
	}
}
