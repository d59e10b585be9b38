package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/responses"
	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/core"
	"github.com/lmlite/lmlite/gateway/openai"
	"github.com/lmlite/lmlite/internal/sse"
	"github.com/lmlite/lmlite/respstore"
)

// decodeResp decodes a /v1/responses body for tenant with store st.
func decodeResp(t *testing.T, st responseStore, tenant, body string) (*input, *apiError) {
	t.Helper()
	c := &responsesCodec{store: st}
	in := &input{}
	return in, c.decode(in, []byte(body), tenant)
}

// TestResponsesDecodeRefusesByName: every parameter the server cannot serve, and
// every unknown one, is a 400 naming the field in the Responses API's terms (not
// chat's, whose checks it reuses).
func TestResponsesDecodeRefusesByName(t *testing.T) {
	for _, tc := range []struct{ body, param string }{
		{`{"model":"tiny","input":"hi","frobnicate":1}`, "frobnicate"},
		{`{"model":"tiny","input":[{"role":"user","content":[{"type":"input_image","image_url":"http://x/y.png"}]}]}`, "input[0].content[0].type"},
		{`{"model":"tiny","input":[{"role":"user","content":[{"type":"input_file","file_id":"file_1"}]}]}`, "input[0].content[0].type"},
		{`{"model":"tiny","input":[{"role":"user","content":[{"type":"input_text","text":"a","extra":1}]}]}`, "input[0].content[0].extra"},
		{`{"model":"tiny","input":[{"type":"item_reference","id":"msg_1"}]}`, "input[0].type"},
		{`{"model":"tiny","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, "input[0].call_id"},
		{`{"model":"tiny","input":[{"role":"tool","content":"x"}]}`, "input[0].role"},
		{`{"model":"tiny","input":"hi","tools":[{"type":"web_search"}]}`, "tools[0].type"},
		{`{"model":"tiny","input":"hi","tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]}`, "tools[0].type"},
		{`{"model":"tiny","input":"hi","tools":[{"type":"computer_use_preview","display_width":1,"display_height":1,"environment":"linux"}]}`, "tools[0].type"},
		{`{"model":"tiny","input":"hi","tools":[{"type":"function","name":"f","function":{}}]}`, "tools[0].function"},
		{`{"model":"tiny","input":"hi","tools":[{"type":"function","name":"f","parameters":[1]}]}`, "tools[0].parameters"},
		{`{"model":"tiny","input":"hi","tools":[{"type":"function","name":"f"},{"type":"function","name":"f"}]}`, "tools[1].name"},
		{`{"model":"tiny","input":"hi","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, "tool_choice"},
		{`{"model":"tiny","input":"hi","tool_choice":{"type":"web_search_preview"}}`, "tool_choice.type"},
		{`{"model":"tiny","input":"hi","text":{"format":{"type":"json_schema","schema":{"type":"object"}}}}`, "text.format.name"},
		{`{"model":"tiny","input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":[]}}}`, "text.format.schema"},
		{`{"model":"tiny","input":"hi","text":{"format":{"type":"yaml"}}}`, "text.format.type"},
		{`{"model":"tiny","input":"hi","text":{"format":{"type":"text","name":"x"}}}`, "text.format"},
		{`{"model":"tiny","input":"hi","max_output_tokens":0}`, "max_output_tokens"},
		{`{"model":"tiny","input":"hi","temperature":3}`, "temperature"},
		{`{"model":"tiny","input":"hi","truncation":"middle"}`, "truncation"},
		{`{"model":"tiny","input":"hi","background":true}`, "background"},
		{`{"model":"tiny","input":"hi","conversation":"conv_1"}`, "conversation"},
		{`{"model":"tiny","input":"hi","include":["message.output_text.logprobs"]}`, "include[0]"},
		{`{"model":"tiny","input":"hi","reasoning":{"effort":"extreme"}}`, "reasoning.effort"},
		{`{"model":"tiny","input":"hi","metadata":{"k":1}}`, "metadata.k"},
		{`{"model":"tiny"}`, "input"},
		{`{"input":"hi"}`, "model"},
		{`{"model":"tiny","input":"hi","previous_response_id":"resp_nope"}`, "previous_response_id"},
	} {
		_, aerr := decodeResp(t, newMemResponses(10), "acme", tc.body)
		if aerr == nil {
			t.Errorf("%s: accepted", tc.body)
			continue
		}
		if aerr = respNames(aerr); aerr.param != tc.param {
			t.Errorf("%s: param %q (%s), want %q", tc.body, aerr.param, aerr.message, tc.param)
		}
	}
}

// TestResponsesDecodeConversation: instructions become the first system message,
// developer a system message, function_call items the assistant's tool calls (one
// message for consecutive calls), function_call_output a tool message; reasoning,
// include and the SDKs' parameters are accepted; store defaults to true.
func TestResponsesDecodeConversation(t *testing.T) {
	in, aerr := decodeResp(t, newMemResponses(10), "acme", `{"model":"tiny","instructions":"be brief",
		"input":[{"role":"developer","content":"dev"},{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
		{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"ok","annotations":[]}]},
		{"type":"function_call","id":"fc_1","call_id":"c1","name":"f","arguments":"{}","status":"completed"},
		{"type":"function_call","call_id":"c2","name":"g","arguments":"{\"x\":1}"},
		{"type":"function_call_output","call_id":"c1","output":"one"},{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"two"}]}],
		"tools":[{"type":"function","name":"f","description":"d","parameters":{"type":"object"},"strict":true},{"type":"function","name":"g","strict":false}],
		"tool_choice":"auto","parallel_tool_calls":true,"reasoning":{"effort":"low"},"include":["reasoning.encrypted_content"],
		"max_output_tokens":9,"temperature":0.5,"top_p":0.9,"seed":4,"user":"u","safety_identifier":"s","prompt_cache_key":"k","truncation":"disabled",
		"metadata":{"a":"b"},"text":{"format":{"type":"text"},"verbosity":"low"},"stream":true,"service_tier":"auto"}`)
	if aerr != nil {
		t.Fatal(aerr)
	}
	want := []engine.Message{
		{Role: "system", Content: "be brief"}, {Role: "system", Content: "dev"}, {Role: "user", Content: "ab"},
		{Role: "assistant", Content: "ok", ToolCalls: []engine.ToolCall{{ID: "c1", Name: "f", Arguments: "{}"}, {ID: "c2", Name: "g", Arguments: `{"x":1}`}}},
		{Role: "tool", Content: "one", ToolCallID: "c1"}, {Role: "tool", Content: "two", ToolCallID: "c2"},
	}
	got, _ := json.Marshal(in.msgs)
	w, _ := json.Marshal(want)
	if !bytes.Equal(got, w) {
		t.Errorf("messages\n%s\nwant\n%s", got, w)
	}
	f := &in.feat
	if len(f.Tools) != 2 || f.Loose[0] || !f.Loose[1] || !f.ToolMsgs || !f.Parallel || f.Choice != toolAuto {
		t.Errorf("features %+v", f)
	}
	if in.kind != kindChat || in.maxTokens != 9 || in.sampling.Seed != 4 || in.sampling.Temperature != 0.5 || !in.stream ||
		in.p.PromptCacheKey != "k" || in.p.User != "u" || !in.resp.store || len(in.resp.items) != 7 {
		t.Errorf("input %+v", in)
	}
	in, aerr = decodeResp(t, nil, "acme", `{"model":"tiny","input":"hi","store":false}`)
	if aerr != nil || in.resp.store || len(in.msgs) != 1 || in.msgs[0].Role != "user" || in.msgs[0].Content != "hi" {
		t.Errorf("store false: %v %+v", aerr, in)
	}
}

// TestResponsesPreviousBelongsToItsTenant: previous_response_id continues the
// tenant's stored conversation (its input, its output, then the new input); another
// tenant's id is a 404, as an unknown one.
func TestResponsesPreviousBelongsToItsTenant(t *testing.T) {
	st := newMemResponses(10)
	st.Put(context.Background(), &storedResponse{ID: "resp_0", Tenant: "acme",
		Input:  []respItem{{Type: "message", Role: "user", Text: "q0", ID: "msg_0"}},
		Output: []respItem{{Type: "message", Role: "assistant", Text: "a0", ID: "msg_1"}}}, respstore.Limits{})
	st.Put(context.Background(), &storedResponse{ID: "resp_1", Tenant: "acme", Previous: "resp_0",
		Input:  []respItem{{Type: "message", Role: "user", Text: "q1", ID: "msg_a"}},
		Output: []respItem{{Type: "message", Role: "assistant", Text: "a1", ID: "msg_b"}}}, respstore.Limits{})
	in, aerr := decodeResp(t, st, "acme", `{"model":"tiny","input":"q2","previous_response_id":"resp_1","instructions":"new"}`)
	if aerr != nil {
		t.Fatal(aerr)
	}
	var roles []string
	for _, m := range in.msgs {
		roles = append(roles, m.Role+":"+m.Content)
	}
	if strings.Join(roles, ",") != "system:new,user:q0,assistant:a0,user:q1,assistant:a1,user:q2" {
		t.Errorf("conversation %v", roles)
	}
	if _, aerr := decodeResp(t, st, "other", `{"model":"tiny","input":"q2","previous_response_id":"resp_1"}`); aerr == nil || aerr.status != 404 {
		t.Errorf("another tenant's previous_response_id: %v", aerr)
	}
}

// renderResp decodes body, feeds evs to the codec's output and returns the SSE bytes.
func renderResp(t *testing.T, st responseStore, body string, evs []outEvent) []byte {
	t.Helper()
	in, aerr := decodeResp(t, st, "acme", body)
	if aerr != nil {
		t.Fatal(aerr)
	}
	o := (&responsesCodec{store: st}).newOutput(&outMeta{Meta: core.Meta{ReqID: "req_00ff", Model: "tiny", Created: 1700000000, Tenant: "acme"}, in: in})
	var b []byte
	for i := range evs {
		b = o.AppendEvent(b, &evs[i])
	}
	return o.AppendEnd(b)
}

// sdkEvents parses an event stream with the official SDK's types, checking that
// each event's "event:" line names its type and that sequence numbers count up
// from 0.
func sdkEvents(t *testing.T, b []byte) []responses.ResponseStreamEventUnion {
	t.Helper()
	var out []responses.ResponseStreamEventUnion
	for _, block := range strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(block, "\n")
		if !ok || !strings.HasPrefix(name, "event: ") || !strings.HasPrefix(data, "data: ") || strings.Contains(data[6:], "\n") {
			t.Fatalf("event %q", block)
		}
		var ev responses.ResponseStreamEventUnion
		if err := json.Unmarshal([]byte(data[6:]), &ev); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if ev.Type != name[7:] || ev.SequenceNumber != int64(len(out)) {
			t.Fatalf("event %q: type %q, sequence_number %d (want %d)", name, ev.Type, ev.SequenceNumber, len(out))
		}
		out = append(out, ev)
	}
	// sse.Reader, the server's own reader, reads the same data.
	r := sse.NewReader(bytes.NewReader(b), 4096)
	for i := range out {
		if _, err := r.NextEvent(); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	return out
}

// TestResponsesStreamEvents: a text then a function call render as OpenAI's whole
// event sequence (each event parsed by the official SDK's types, with its sequence
// number), ending with response.completed carrying the whole Response, which is
// stored; an output cut at max_output_tokens ends with response.incomplete and its
// reason; a failure with response.failed and its error.
func TestResponsesStreamEvents(t *testing.T) {
	st := newMemResponses(10)
	body := `{"model":"tiny","input":"hi","stream":true,"tools":[{"type":"function","name":"get_weather"}],"metadata":{"k":"v"}}`
	u := engine.Usage{PromptTokens: 11, CompletionTokens: 6, CachedTokens: 3}
	evs := sdkEvents(t, renderResp(t, st, body, []outEvent{
		{Kind: outStart}, {Kind: outText, Text: "Hel"}, {Kind: outText, Text: "lo"},
		{Kind: outCall, CallID: "call_1", Name: "get_weather"}, {Kind: outCall, Args: `{"city":`}, {Kind: outCall, Args: `"Paris"}`},
		{Kind: outFinish, Finish: "tool_calls"}, {Kind: outUsage, Usage: u},
	}))
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	want := "response.created response.in_progress " +
		"response.output_item.added response.content_part.added response.output_text.delta response.output_text.delta " +
		"response.output_text.done response.content_part.done response.output_item.done " +
		"response.output_item.added response.function_call_arguments.delta response.function_call_arguments.delta " +
		"response.function_call_arguments.done response.output_item.done response.completed"
	if strings.Join(types, " ") != want {
		t.Fatalf("events\n%s\nwant\n%s", strings.Join(types, " "), want)
	}
	delta := evs[4].AsResponseOutputTextDelta()
	if delta.ItemID != "msg_00ff_0" || delta.OutputIndex != 0 || delta.ContentIndex != 0 || delta.Delta != "Hel" {
		t.Errorf("text delta %+v", delta)
	}
	if d := evs[6].AsResponseOutputTextDone(); d.Text != "Hello" {
		t.Errorf("text done %+v", d)
	}
	if d := evs[12].AsResponseFunctionCallArgumentsDone(); d.Arguments != `{"city":"Paris"}` || d.ItemID != "fc_00ff_1" || d.OutputIndex != 1 {
		t.Errorf("arguments done %+v", d)
	}
	if it := evs[13].AsResponseOutputItemDone().Item.AsFunctionCall(); it.CallID != "call_1" || it.Name != "get_weather" || it.Status != "completed" {
		t.Errorf("call item %+v", it)
	}
	r := evs[len(evs)-1].AsResponseCompleted().Response
	if r.ID != "resp_00ff" || r.Status != "completed" || r.Model != "tiny" || r.OutputText() != "Hello" || len(r.Output) != 2 ||
		r.Output[1].AsFunctionCall().Arguments != `{"city":"Paris"}` || r.Usage.InputTokens != 11 || r.Usage.OutputTokens != 6 ||
		r.Usage.TotalTokens != 17 || r.Usage.InputTokensDetails.CachedTokens != 3 || r.Metadata["k"] != "v" || len(r.Tools) != 1 ||
		r.Tools[0].Name != "get_weather" || !r.ParallelToolCalls || r.ToolChoice.OfToolChoiceMode != "auto" || r.Text.Format.Type != "text" {
		t.Errorf("completed response %+v", r)
	}
	s, err := st.Get(context.Background(), "acme", "resp_00ff")
	if err != nil || len(s.Input) != 1 || s.Input[0].ID != "msg_00ff_in0" || len(s.Output) != 2 || !bytes.Equal(s.Body, []byte(r.RawJSON())) ||
		s.Model != "tiny" || s.Created != 1700000000 {
		t.Errorf("stored %+v, %v", s, err)
	}

	evs = sdkEvents(t, renderResp(t, nil, `{"model":"tiny","input":"hi","max_output_tokens":2}`, []outEvent{
		{Kind: outStart}, {Kind: outText, Text: "a b"}, {Kind: outFinish, Finish: "length"}, {Kind: outUsage, Usage: u},
	}))
	last := evs[len(evs)-1]
	if r := last.AsResponseIncomplete().Response; last.Type != "response.incomplete" || r.Status != "incomplete" ||
		r.IncompleteDetails.Reason != "max_output_tokens" || r.OutputText() != "a b" || r.MaxOutputTokens != 2 {
		t.Errorf("incomplete: %s", last.RawJSON())
	}

	evs = sdkEvents(t, renderResp(t, nil, `{"model":"tiny","input":"hi"}`, []outEvent{
		{Kind: outStart}, {Kind: outText, Text: "a"}, {Kind: outError, Err: &core.Error{Status: 500, Message: "boom"}},
	}))
	last = evs[len(evs)-1]
	if r := last.AsResponseFailed().Response; last.Type != "response.failed" || r.Status != "failed" || r.Error.Message != "boom" || r.Error.Code != "server_error" {
		t.Errorf("failed: %s", last.RawJSON())
	}
}

// TestResponsesWhole: an answer not streamed is the Response object the official
// SDK reads: a message item with an output_text part, then the function calls (one
// only with parallel_tool_calls false), usage, the request's echo (json_schema
// flat in text.format), and it is stored, with input_items listing its input.
func TestResponsesWhole(t *testing.T) {
	st := newMemResponses(10)
	in, aerr := decodeResp(t, st, "acme", `{"model":"tiny","input":[{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"user","content":"q2"}],
		"instructions":"sys","text":{"format":{"type":"json_schema","name":"w","schema":{"type":"object"},"strict":true}},"parallel_tool_calls":false,
		"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"temperature":0.2}`)
	if aerr != nil {
		t.Fatal(aerr)
	}
	o := (&responsesCodec{store: st}).newOutput(&outMeta{Meta: core.Meta{ReqID: "req_0a", Model: "tiny", Created: 5, Tenant: "acme"}, in: in})
	b := o.AppendWhole(nil, &whole{Choices: []wholeChoice{{Content: "{}", Finish: "tool_calls",
		Calls: []wholeCall{{ID: "c1", Name: "f", Arguments: "{}"}, {ID: "c2", Name: "f", Arguments: "{}"}}}}, Usage: engine.Usage{PromptTokens: 4, CompletionTokens: 2}})
	var r responses.Response
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.ID != "resp_0a" || r.Object != "response" || r.CreatedAt != 5 || r.Status != "completed" || len(r.Output) != 2 ||
		r.Output[0].AsMessage().Content[0].Text != "{}" || r.Output[0].AsMessage().Content[0].Type != "output_text" ||
		r.Output[1].AsFunctionCall().CallID != "c1" || r.Output[1].ID != "fc_0a_1" || r.Usage.TotalTokens != 6 ||
		r.Instructions.OfString != "sys" || r.Temperature != 0.2 || r.TopP != 1 || r.ParallelToolCalls || !strings.Contains(string(b), `"store":true`) ||
		r.Text.Format.Type != "json_schema" || r.Text.Format.Name != "w" || !r.Text.Format.Strict || r.Truncation != "disabled" ||
		len(r.Tools) != 1 || !r.Tools[0].Strict || in.feat.Loose[0] { // a function tool is strict unless it says not
		t.Errorf("response %s", b)
	}
	if !json.Valid(b) || strings.Contains(string(b), "\n") {
		t.Errorf("body %s", b)
	}
	s, err := st.Get(context.Background(), "acme", "resp_0a")
	if err != nil {
		t.Fatal(err)
	}
	if s.Previous != "" || len(s.Input) != 3 || s.Input[2].ID != "msg_0a_in2" || len(s.Output) != 2 {
		t.Errorf("stored %+v", s)
	}
	page := func(q string) []byte {
		p, aerr := parseItemsPage(parseArgs(q))
		if aerr != nil {
			t.Fatal(aerr)
		}
		items, more, err := st.InputItems(context.Background(), "acme", "resp_0a", p)
		if err != nil {
			t.Fatal(err)
		}
		return openai.AppendItemsPage(nil, items, more)
	}
	var list struct {
		Object  string            `json:"object"`
		Data    []json.RawMessage `json:"data"`
		FirstID string            `json:"first_id"`
		LastID  string            `json:"last_id"`
		HasMore bool              `json:"has_more"`
	}
	b = page("order=asc&limit=2")
	if err := json.Unmarshal(b, &list); err != nil || list.Object != "list" || len(list.Data) != 2 || !list.HasMore ||
		list.FirstID != "msg_0a_in0" || list.LastID != "msg_0a_in1" {
		t.Errorf("input items page %s", b)
	}
	b = page("order=asc&after=msg_0a_in1")
	if err := json.Unmarshal(b, &list); err != nil || len(list.Data) != 1 || list.HasMore || list.FirstID != "msg_0a_in2" {
		t.Errorf("input items after: %s", b)
	}
	b = page("")
	if err := json.Unmarshal(b, &list); err != nil || len(list.Data) != 3 || list.FirstID != "msg_0a_in2" {
		t.Errorf("input items, newest first: %s", b)
	}
}

func parseArgs(q string) *fasthttp.Args {
	var a fasthttp.Args
	a.Parse(q)
	return &a
}

// TestResponsesErrorNames: the errors the core finds after decoding (a schema the
// grammar refuses, a prompt over the model's limit, a conversation the chat template
// refuses) name the fields as the Responses API does.
func TestResponsesErrorNames(t *testing.T) {
	for _, tc := range []struct{ chat, resp string }{
		{"response_format.json_schema.schema", "text.format.schema"},
		{"response_format", "text.format"},
		{"tools[1].function.parameters", "tools[1].parameters"},
		{"messages", "input"},
		{"max_tokens", "max_output_tokens"},
		{"temperature", "temperature"},
	} {
		e := badRequest(tc.chat, "invalid '"+tc.chat+"'")
		var b []byte
		b = (&responsesCodec{}).appendError(b, e)
		var got struct {
			Error struct{ Param, Message string }
		}
		if err := json.Unmarshal(b, &got); err != nil || got.Error.Param != tc.resp || got.Error.Message != "invalid '"+tc.resp+"'" {
			t.Errorf("%s: %s", tc.chat, b)
		}
	}
}

// FuzzResponsesDecode: any body is decoded or refused with a 4xx naming a field,
// never a panic; an accepted one has messages, and its echo makes the Response
// object valid JSON.
func FuzzResponsesDecode(f *testing.F) {
	for _, s := range []string{
		`{"model":"tiny","input":"hi"}`,
		`{"model":"tiny","instructions":"x","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"f"}}`,
		`{"model":"tiny","input":"hi","text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"},"strict":true}},"metadata":{"a":"b"},"previous_response_id":"resp_1"}`,
	} {
		f.Add([]byte(s))
	}
	st := newMemResponses(4)
	st.Put(context.Background(), &storedResponse{ID: "resp_1", Tenant: "acme", Input: []respItem{{Type: "message", Role: "user", Text: "q", ID: "m"}}}, respstore.Limits{})
	f.Fuzz(func(t *testing.T, body []byte) {
		c := &responsesCodec{store: st}
		in := &input{}
		if aerr := c.decode(in, body, "acme"); aerr != nil {
			if aerr.status < 400 || aerr.status >= 500 || aerr.param == "" && aerr.status == 400 {
				t.Fatalf("%s: %+v", body, aerr)
			}
			return
		}
		if len(in.msgs) == 0 || in.resp == nil || in.p == nil {
			t.Fatalf("%s: accepted without messages", body)
		}
		o := c.newOutput(&outMeta{Meta: core.Meta{ReqID: "req_1", Model: "tiny"}, in: in})
		b := o.AppendWhole(nil, &whole{Choices: []wholeChoice{{Content: "x", Finish: "stop"}}})
		if !json.Valid(b) {
			t.Fatalf("%s: response %s", body, b)
		}
	})
}
