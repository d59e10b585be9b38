package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/core"
)

// decodeMessages decodes a Messages body as POST /v1/messages does.
func decodeMessages(t *testing.T, body string) (input, *apiError) {
	t.Helper()
	var in input
	aerr := messagesAPI.decode(&in, []byte(body), "acme")
	return in, aerr
}

// TestMessagesDecode: system (a string, text blocks), text, tool_use and
// tool_result blocks become the chat template's messages; tools, tool_choice and
// the sampling fields become the core's features and sampling.
func TestMessagesDecode(t *testing.T) {
	in, aerr := decodeMessages(t, `{
		"model": "tiny", "max_tokens": 64, "stream": true,
		"system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "and kind"}],
		"messages": [
			{"role": "user", "content": "weather in Paris?"},
			{"role": "assistant", "content": [
				{"type": "thinking", "thinking": "hmm", "signature": "sig"},
				{"type": "text", "text": "Let me look."},
				{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
			{"role": "user", "content": [
				{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "21C"}]},
				{"type": "tool_result", "tool_use_id": "toolu_2", "content": "boom", "is_error": true},
				{"type": "text", "text": "thanks", "cache_control": {"type": "ephemeral"}},
				{"type": "text", "text": "and Rome?"}]}
		],
		"tools": [{"name": "get_weather", "description": "The weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
			"cache_control": {"type": "ephemeral"}}],
		"tool_choice": {"type": "any", "disable_parallel_tool_use": true},
		"stop_sequences": ["END", ""], "temperature": 0.5, "top_p": 0.9, "top_k": 40,
		"metadata": {"user_id": "u-123"}, "thinking": {"type": "enabled", "budget_tokens": 2048}, "service_tier": "auto",
		"lmlite": {"tier_mode": "balanced", "seed": 7}
	}`)
	if aerr != nil {
		t.Fatal(aerr)
	}
	want := []engine.Message{
		{Role: "system", Content: "be brief\n\nand kind"},
		{Role: "user", Content: "weather in Paris?"},
		{Role: "assistant", Content: "Let me look.", ToolCalls: []engine.ToolCall{{ID: "toolu_1", Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
		{Role: "tool", Content: "21C", ToolCallID: "toolu_1"},
		{Role: "tool", Content: "Error: boom", ToolCallID: "toolu_2"},
		{Role: "user", Content: "thanks\n\nand Rome?"},
	}
	if !reflect.DeepEqual(in.msgs, want) {
		t.Errorf("messages\n%+v\nwant\n%+v", in.msgs, want)
	}
	f := in.feat
	if len(f.Tools) != 1 || f.Tools[0].Name != "get_weather" || f.Tools[0].Description != "The weather" ||
		!strings.Contains(string(f.Tools[0].Parameters), `"city"`) || f.Choice != toolRequired || f.Parallel || !f.ToolMsgs || f.N != 1 {
		t.Errorf("features %+v", f)
	}
	s := in.sampling
	if s.Temperature != 0.5 || s.TopP != 0.9 || s.TopK != 40 || s.Seed != 7 || in.maxTokens != 64 || !in.stream ||
		!reflect.DeepEqual(in.stop, []string{"END"}) || in.kind != kindChat {
		t.Errorf("sampling %+v, max %d, stream %v, stop %q", s, in.maxTokens, in.stream, in.stop)
	}
	if in.p.User != "u-123" || in.p.Model != "tiny" || in.p.LMLite == nil || in.p.LMLite.TierMode != "balanced" {
		t.Errorf("params %+v", in.p)
	}
	if in.promptBytes < len("be brief\n\nand kind")+len("weather in Paris?")+len("get_weather") {
		t.Errorf("prompt bytes %d", in.promptBytes)
	}

	// tool_choice: auto, tool (named), none; parallel calls by default.
	for _, tc := range []struct {
		choice string
		want   int8
		named  string
	}{{`{"type":"auto"}`, toolAuto, ""}, {`{"type":"tool","name":"get_weather"}`, toolNamed, "get_weather"}, {`{"type":"none"}`, toolNone, ""}} {
		in, aerr := decodeMessages(t, `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":"hi"}],
			"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"tool_choice":`+tc.choice+`}`)
		if aerr != nil || in.feat.Choice != tc.want || in.feat.Named != tc.named || !in.feat.Parallel {
			t.Errorf("tool_choice %s: %+v %v", tc.choice, in.feat, aerr)
		}
	}
	// output_config.format is structured output; temperature 0 is greedy.
	in, aerr = decodeMessages(t, `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"temperature":0,
		"output_config":{"effort":"low","format":{"type":"json_schema","schema":{"type":"object"}}}}`)
	if aerr != nil || in.feat.Format != formatJSONSchema || !in.feat.Strict || string(in.feat.Schema) != `{"type":"object"}` || in.sampling.Temperature != 0 {
		t.Errorf("output_config: %+v %v", in.feat, aerr)
	}
	// count_tokens: max_tokens is not required.
	var cin input
	if aerr := countAPI.decode(&cin, []byte(`{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`), "acme"); aerr != nil || cin.maxTokens != 0 {
		t.Errorf("count_tokens without max_tokens: %v", aerr)
	}
}

// TestMessagesDecodeErrors: what the server refuses is a 400 naming the field or
// block in the Messages API's terms.
func TestMessagesDecodeErrors(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name, body, param string
	}{
		{"max_tokens missing", `{"model":"tiny",` + msgs + `}`, "max_tokens"},
		{"max_tokens zero", `{"model":"tiny","max_tokens":0,` + msgs + `}`, "max_tokens"},
		{"model missing", `{"max_tokens":5,` + msgs + `}`, "model"},
		{"unknown member", `{"model":"tiny","max_tokens":5,"frequency_penalty":1,` + msgs + `}`, "frequency_penalty"},
		{"unknown block member", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"x","foo":1}]}]}`, "messages[0].content[0].foo"},
		{"image block", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`, "messages[0].content[1]"},
		{"document block", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]}`, "messages[0].content[0]"},
		{"image in a tool result", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{}}]}]}]}`, "messages[0].content[0].content[0]"},
		{"image in system", `{"model":"tiny","max_tokens":5,"system":[{"type":"image"}],` + msgs + `}`, "system[0]"},
		{"bad role", `{"model":"tiny","max_tokens":5,"messages":[{"role":"developer","content":"x"}]}`, "messages[0].role"},
		{"clear_at on a user message", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":"x","clear_at":"never"}]}`, "messages[0].clear_at"},
		{"tool_addition block", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"system","content":[{"type":"tool_addition"}]}]}`, "messages[1].content[0]"},
		{"context edit not served", `{"model":"tiny","max_tokens":5,"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]},` + msgs + `}`, "context_management.edits[0].type"},
		{"prefill", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"The answer is"}]}`, "messages[1].role"},
		{"no messages", `{"model":"tiny","max_tokens":5,"messages":[]}`, "messages"},
		{"tool_use without id", `{"model":"tiny","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]},{"role":"user","content":"x"}]}`, "messages[0].content[0].id"},
		{"tool_use input not an object", `{"model":"tiny","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":[1]}]},{"role":"user","content":"x"}]}`, "messages[0].content[0].input"},
		{"tool_result without id", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, "messages[0].content[0].tool_use_id"},
		{"server tool", `{"model":"tiny","max_tokens":5,` + msgs + `,"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, "tools[0].type"},
		{"tool without schema", `{"model":"tiny","max_tokens":5,` + msgs + `,"tools":[{"name":"f"}]}`, "tools[0].input_schema"},
		{"tool schema not an object", `{"model":"tiny","max_tokens":5,` + msgs + `,"tools":[{"name":"f","input_schema":[1]}]}`, "tools[0].input_schema"},
		{"tool named twice", `{"model":"tiny","max_tokens":5,` + msgs + `,"tools":[{"name":"f","input_schema":{}},{"name":"f","input_schema":{}}]}`, "tools[1].name"},
		{"tool_choice names no tool", `{"model":"tiny","max_tokens":5,` + msgs + `,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"tool","name":"g"}}`, "tool_choice"},
		{"tool_choice any without tools", `{"model":"tiny","max_tokens":5,` + msgs + `,"tool_choice":{"type":"any"}}`, "tool_choice"},
		{"tool_choice bad type", `{"model":"tiny","max_tokens":5,` + msgs + `,"tool_choice":{"type":"required"}}`, "tool_choice.type"},
		{"temperature over 1", `{"model":"tiny","max_tokens":5,"temperature":1.5,` + msgs + `}`, "temperature"},
		{"top_p", `{"model":"tiny","max_tokens":5,"top_p":0,` + msgs + `}`, "top_p"},
		{"thinking budget", `{"model":"tiny","max_tokens":5,"thinking":{"type":"enabled","budget_tokens":10},` + msgs + `}`, "thinking.budget_tokens"},
		{"service_tier", `{"model":"tiny","max_tokens":5,"service_tier":"flex",` + msgs + `}`, "service_tier"},
		{"output format", `{"model":"tiny","max_tokens":5,"output_config":{"format":{"type":"json_schema","schema":[1]}},` + msgs + `}`, "output_config.format.schema"},
		{"content type", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":5}]}`, "messages[0].content"},
	} {
		_, aerr := decodeMessages(t, tc.body)
		if aerr == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if aerr.status != 400 || aerr.param != tc.param {
			t.Errorf("%s: %d param %q (%s), want 400 %q", tc.name, aerr.status, aerr.param, aerr.message, tc.param)
		}
		// The error names the field in Anthropic's shape too.
		var body struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal(messagesAPI.appendError(nil, aerr), &body); err != nil || body.Type != "error" ||
			body.Error.Type != "invalid_request_error" || !strings.Contains(body.Error.Message, tc.param) {
			t.Errorf("%s: error body %+v %v", tc.name, body, err)
		}
	}
}

// TestMessagesErrorShape: errors are Anthropic's {"type":"error","error":{type,
// message}}, the type following the status, 529 for an overloaded engine; the
// chat decoder's and the planner's field names are the Messages API's.
func TestMessagesErrorShape(t *testing.T) {
	for _, tc := range []struct {
		e      *apiError
		status int
		typ    string
		msg    string
	}{
		{&apiError{status: 401, typ: "invalid_request_error", code: "invalid_api_key", message: "incorrect API key provided"}, 401, "authentication_error", "incorrect API key provided"},
		{&apiError{status: 403, code: "tier_not_allowed", param: "model", message: "your plan does not allow the tier"}, 403, "permission_error", "model: your plan does not allow the tier"},
		{&apiError{status: 404, code: "model_not_found", param: "model", message: "The model 'x' does not exist"}, 404, "not_found_error", "The model 'x' does not exist"},
		{&apiError{status: 429, code: "rate_limit_exceeded", message: "rate limit reached"}, 429, "rate_limit_error", "rate limit reached"},
		{&apiError{status: 503, code: "overloaded", message: "engine: queue full"}, 529, "overloaded_error", "engine: queue full"},
		{&apiError{status: 503, code: "shutting_down", message: "the server is shutting down"}, 529, "overloaded_error", "the server is shutting down"},
		{&apiError{status: 503, code: "quota_state_unavailable", message: "retry shortly"}, 503, "api_error", "retry shortly"},
		{&apiError{status: 500, message: "internal error"}, 500, "api_error", "internal error"},
		{&apiError{status: 413, code: "request_too_large", param: "body", message: "too large"}, 413, "request_too_large", "too large"},
		{contextLengthExceeded("messages", "the prompt is 600 tokens, over the model's limit of 512"), 400, "invalid_request_error",
			"prompt is too long: messages: the prompt is 600 tokens, over the model's limit of 512"},
		{badRequest("tools[1].function.parameters", "the parameters schema is not supported: x"), 400, "invalid_request_error",
			"tools[1].input_schema: the parameters schema is not supported: x"},
		{badRequest("response_format.json_schema.schema", "the schema is not supported: x"), 400, "invalid_request_error",
			"output_config.format.schema: the schema is not supported: x"},
	} {
		var body struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		b := messagesAPI.appendError(nil, tc.e)
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if got := messagesAPI.errorStatus(tc.e); got != tc.status || body.Type != "error" || body.Error.Type != tc.typ || body.Error.Message != tc.msg {
			t.Errorf("%+v: status %d, body %s; want %d %s %q", tc.e, got, b, tc.status, tc.typ, tc.msg)
		}
	}
}

// testMeta is an output's request: model tiny, 12 prompt tokens.
func testMeta(parallel bool) *outMeta {
	return &outMeta{Meta: core.Meta{ReqID: "req_00ff", Model: "tiny", Created: 1, Tenant: "acme", Prompt: 12}, in: &input{kind: kindChat, feat: features{N: 1, Parallel: parallel}}}
}

// sseEvents splits an Anthropic event stream into its events' names and data,
// checking each event's name is its data's type.
func sseEvents(t *testing.T, b []byte) (names []string, datas []string) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data := strings.TrimPrefix(line, "data: ")
			var typ struct{ Type string }
			if err := json.Unmarshal([]byte(data), &typ); err != nil || typ.Type != name {
				t.Fatalf("event %q with data %s (%v)", name, data, err)
			}
			names, datas = append(names, name), append(datas, data)
		case line != "":
			t.Fatalf("unexpected line %q", line)
		}
	}
	return names, datas
}

// TestMessagesStream: the core's events render as Anthropic's stream, which the
// official SDK's accumulator reads into the Message the same result renders whole:
// text, then a tool_use block whose input came in fragments; stop_reason tool_use;
// usage with the prefix cache's tokens apart.
func TestMessagesStream(t *testing.T) {
	u := engine.Usage{PromptTokens: 12, CachedTokens: 8, CompletionTokens: 9, FinishReason: engine.FinishStop}
	evs := []outEvent{
		{Kind: outStart},
		{Kind: outText, Text: "Let me "},
		{Kind: outText, Text: "check."},
		{Kind: outCall, Call: 0, CallID: "call_00ff_0_0", Name: "get_weather", Args: ""},
		{Kind: outCall, Call: 0, Args: `{"city": `},
		{Kind: outCall, Call: 0, Args: `"Paris"}`},
		{Kind: outCall, Call: 1, CallID: "call_00ff_0_1", Name: "get_time", Args: `{}`},
		{Kind: outFinish, Finish: "tool_calls"},
		{Kind: outUsage, Usage: u},
	}
	w := &whole{Choices: []wholeChoice{{Content: "Let me check.", Finish: "tool_calls", Calls: []wholeCall{
		{ID: "call_00ff_0_0", Name: "get_weather", Arguments: `{"city": "Paris"}`}, {ID: "call_00ff_0_1", Name: "get_time", Arguments: `{}`}}}}, Usage: u}
	for _, parallel := range []bool{true, false} {
		o := messagesAPI.newOutput(testMeta(parallel))
		if o.ContentType(true) != "text/event-stream" || o.ContentType(false) != "application/json" {
			t.Fatal("content types")
		}
		var b []byte
		b = o.(pinger).AppendPing(b)
		for i := range evs {
			b = o.AppendEvent(b, &evs[i])
		}
		b = o.AppendEnd(b)
		names, datas := sseEvents(t, b)
		wantNames := "ping message_start content_block_start content_block_delta content_block_delta content_block_stop " +
			"content_block_start content_block_delta content_block_delta content_block_stop " +
			"content_block_start content_block_delta content_block_stop message_delta message_stop"
		if !parallel { // the second call is not rendered
			wantNames = "ping message_start content_block_start content_block_delta content_block_delta content_block_stop " +
				"content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop"
		}
		if got := strings.Join(names, " "); got != wantNames {
			t.Fatalf("parallel %v: events\n%s\nwant\n%s", parallel, got, wantNames)
		}
		var acc anthropic.Message
		for _, d := range datas {
			var ev anthropic.MessageStreamEventUnion
			if err := ev.UnmarshalJSON([]byte(d)); err != nil {
				t.Fatal(err)
			}
			if err := acc.Accumulate(ev); err != nil {
				t.Fatalf("%s: %v", d, err)
			}
		}
		var wm anthropic.Message
		if err := json.Unmarshal(messagesAPI.newOutput(testMeta(parallel)).AppendWhole(nil, w), &wm); err != nil {
			t.Fatal(err)
		}
		for _, m := range []anthropic.Message{acc, wm} {
			calls := 2
			if !parallel {
				calls = 1
			}
			if m.ID != "msg_00ff" || m.Model != "tiny" || m.Role != "assistant" || m.StopReason != "tool_use" || len(m.Content) != 1+calls ||
				m.Content[0].Type != "text" || m.Content[0].Text != "Let me check." ||
				m.Content[1].Type != "tool_use" || m.Content[1].ID != "toolu_00ff_0_0" || m.Content[1].Name != "get_weather" {
				t.Fatalf("parallel %v: message %+v", parallel, m)
			}
			var input map[string]string
			if err := json.Unmarshal(m.Content[1].Input, &input); err != nil || input["city"] != "Paris" {
				t.Fatalf("input %s: %v", m.Content[1].Input, err)
			}
			if m.Usage.InputTokens != 4 || m.Usage.CacheReadInputTokens != 8 || m.Usage.OutputTokens != 9 || m.Usage.CacheCreationInputTokens != 0 {
				t.Fatalf("usage %+v", m.Usage)
			}
		}
	}
}

// TestMessagesStopReasons: length is max_tokens; a stop string is stop_sequence
// with the string; the end of the text end_turn; an output with nothing written is
// one empty text block, streamed or not.
func TestMessagesStopReasons(t *testing.T) {
	for _, tc := range []struct {
		finish, stopSeq, reason string
	}{{"length", "", "max_tokens"}, {"stop", "END", "stop_sequence"}, {"stop", "", "end_turn"}} {
		u := engine.Usage{PromptTokens: 5, CompletionTokens: 1, StopSequence: tc.stopSeq}
		o := messagesAPI.newOutput(testMeta(true))
		var b []byte
		for _, ev := range []outEvent{{Kind: outStart}, {Kind: outFinish, Finish: tc.finish}, {Kind: outUsage, Usage: u}} {
			b = o.AppendEvent(b, &ev)
		}
		b = o.AppendEnd(b)
		var acc anthropic.Message
		_, datas := sseEvents(t, b)
		for _, d := range datas {
			var ev anthropic.MessageStreamEventUnion
			if err := ev.UnmarshalJSON([]byte(d)); err != nil {
				t.Fatal(err)
			}
			if err := acc.Accumulate(ev); err != nil {
				t.Fatal(err)
			}
		}
		var wm anthropic.Message
		wb := messagesAPI.newOutput(testMeta(true)).AppendWhole(nil, &whole{Choices: []wholeChoice{{Finish: tc.finish}}, Usage: u})
		if err := json.Unmarshal(wb, &wm); err != nil {
			t.Fatal(err)
		}
		for _, m := range []anthropic.Message{acc, wm} {
			if string(m.StopReason) != tc.reason || m.StopSequence != tc.stopSeq || len(m.Content) != 1 || m.Content[0].Type != "text" || m.Content[0].Text != "" {
				t.Errorf("%s/%q: %+v", tc.finish, tc.stopSeq, m)
			}
		}
	}
}

// TestMessagesStreamError: an error after the stream began is an error event in
// Anthropic's shape, and nothing follows it (no message_stop).
func TestMessagesStreamError(t *testing.T) {
	o := messagesAPI.newOutput(testMeta(true))
	var b []byte
	for _, ev := range []outEvent{{Kind: outStart}, {Kind: outText, Text: "Hel"},
		{Kind: outError, Err: &core.Error{Status: 503, Code: "overloaded", Message: "engine: restarting"}}, {Kind: outText, Text: "lo"}} {
		b = o.AppendEvent(b, &ev)
	}
	b = o.AppendEnd(b)
	names, datas := sseEvents(t, b)
	if got := strings.Join(names, " "); got != "message_start content_block_start content_block_delta error" {
		t.Fatalf("events %s", got)
	}
	if !strings.Contains(datas[3], `"type":"overloaded_error"`) {
		t.Fatalf("error event %s", datas[3])
	}
}

// FuzzMessagesBody: any body is either accepted, as a conversation the chat
// template can take (roles system, user, assistant, tool; each tool message with its
// call's id; max_tokens at least 1), or refused with a 400 naming a field, rendered
// as valid JSON in Anthropic's shape; the decoder never panics.
func FuzzMessagesBody(f *testing.F) {
	f.Add([]byte(`{"model":"tiny","max_tokens":5,"system":"s","messages":[{"role":"user","content":"hi"}],"stop_sequences":["a"],"stream":true}`))
	f.Add([]byte(`{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}},{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"}],"is_error":true}]},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":1}}]},{"role":"user","content":"y"}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"}}`))
	f.Add([]byte(`{"model":"auto","max_tokens":1,"lmlite":{"tier_mode":"fixed","tier":"fast","seed":3},"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`))
	f.Add([]byte("{\"model\":\"x\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		var in input
		e := messagesAPI.decode(&in, body, "acme")
		if e != nil {
			if e.param == "" || e.status != 400 {
				t.Fatalf("refusal without a field: %+v", e)
			}
			if b := messagesAPI.appendError(nil, e); !json.Valid(b) {
				t.Fatalf("error body %q", b)
			}
			return
		}
		if len(in.msgs) == 0 || in.maxTokens < 1 || in.kind != kindChat || in.p == nil || in.p.Model == "" {
			t.Fatalf("accepted %+v", in)
		}
		for _, m := range in.msgs {
			if !oneOf(m.Role, "system", "user", "assistant", "tool") || (m.Role == "tool") != (m.ToolCallID != "") {
				t.Fatalf("message %+v", m)
			}
		}
	})
}
