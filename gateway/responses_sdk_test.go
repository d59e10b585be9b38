package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/responses"
	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/genmodel"
	enginemodel "github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/respstore"
)

// startResponsesServer serves the generated tiny llama (tiny, no template) and a
// generated model with Qwen's template (toolsm: its template renders tools) to two
// tenants, acme and other, its responses stored in bbolt (respstore.Bolt), as
// `lmlite serve` stores them without Redis.
func startResponsesServer(t *testing.T) *engineServer {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "engine", "testdata", "families", "qwen.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "toolsm.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 5, ChatTemplate: string(src)}, path); err != nil {
		t.Fatal(err)
	}
	rb, err := respstore.OpenBolt(filepath.Join(t.TempDir(), "responses.db"), respstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rb.Close() })
	return startEngineWith(t, `
ledger: {sync: process}
models:
  - {id: tiny, path: $TINY, max_model_len: 2048, max_concurrency: 16}
  - {id: toolsm, path: `+path+`, max_model_len: 2048, max_concurrency: 16}
tiers:
  fast: [{model: tiny, quality: 0.5}]
  balanced: [{model: toolsm, quality: 0.6}]
plans:
  open: {requests_per_second: 1000, burst: 1000, max_concurrency: 100}
tenants:
  - {id: acme, plan: open}
  - {id: other, plan: open}
`, engine.Config{}, Options{Responses: rb}, nil)
}

func textInput(s string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: openai.String(s)}
}

// streamResponse streams a request and returns the response that
// response.completed (or .incomplete) carried, the text its deltas add up to, and
// the events' types.
func streamResponse(t *testing.T, c openai.Client, p responses.ResponseNewParams, opts ...option.RequestOption) (responses.Response, string, []string) {
	t.Helper()
	stream := c.Responses.NewStreaming(context.Background(), p, opts...)
	var text strings.Builder
	var types []string
	var final responses.Response
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.AsResponseOutputTextDelta().Delta)
		case "response.completed":
			final = ev.AsResponseCompleted().Response
		case "response.incomplete":
			final = ev.AsResponseIncomplete().Response
		case "response.failed":
			t.Fatalf("response.failed: %s", ev.RawJSON())
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	return final, text.String(), types
}

// TestSDKResponses: openai-go's Responses client, not streamed and streamed: the
// same text for the same seed, the text the same seed gives through
// chat/completions for the same conversation, usage, the echo the SDK reads, and
// max_output_tokens ending the response incomplete with its reason.
func TestSDKResponses(t *testing.T) {
	es := startResponsesServer(t)
	ctx := context.Background()
	p := responses.ResponseNewParams{
		Model: "tiny", Input: textInput("Tell me a story."), Instructions: openai.String("Be brief."),
		MaxOutputTokens: openai.Int(24), Temperature: openai.Float(0.8), TopP: openai.Float(0.95),
		Metadata: map[string]string{"run": "1"},
	}
	seed := option.WithJSONSet("seed", 7)
	var raw *http.Response
	r, err := es.client.Responses.New(ctx, p, seed, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.ID, "resp_") || r.Object != "response" || r.Model != "tiny" || r.OutputText() == "" || len(r.Output) != 1 ||
		r.Output[0].Type != "message" || r.Output[0].AsMessage().Role != "assistant" || r.Usage.InputTokens == 0 ||
		r.Usage.OutputTokens == 0 || r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens ||
		r.Instructions.OfString != "Be brief." || r.Temperature != 0.8 || r.TopP != 0.95 || r.Metadata["run"] != "1" ||
		r.MaxOutputTokens != 24 || r.CreatedAt == 0 || raw.Header.Get("X-LMLite-Model") != "tiny" {
		t.Fatalf("response %s", r.RawJSON())
	}
	if r.Status == "incomplete" && (r.Usage.OutputTokens != 24 || r.IncompleteDetails.Reason != "max_output_tokens") {
		t.Fatalf("incomplete: %s", r.RawJSON())
	}

	// The same conversation and seed through chat/completions: the same text.
	cc, err := es.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Tell me a story.")},
		MaxTokens: openai.Int(24), Temperature: openai.Float(0.8), TopP: openai.Float(0.95), Seed: openai.Int(7),
	})
	if err != nil {
		t.Fatal(err)
	}
	if cc.Choices[0].Message.Content != r.OutputText() || cc.Usage.PromptTokens != r.Usage.InputTokens {
		t.Fatalf("chat %q (%d prompt tokens), responses %q (%d)", cc.Choices[0].Message.Content, cc.Usage.PromptTokens, r.OutputText(), r.Usage.InputTokens)
	}

	// Streamed: the whole event sequence, the same text, the same response.
	final, text, types := streamResponse(t, es.client, p, seed)
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	if len(types) < 8 || strings.Join(types[:4], " ") != strings.Join(want, " ") ||
		strings.Join(types[len(types)-4:], " ") != "response.output_text.done response.content_part.done response.output_item.done response."+string(final.Status) {
		t.Fatalf("events %v", types)
	}
	if text != r.OutputText() || final.OutputText() != text || final.Usage.OutputTokens != r.Usage.OutputTokens || final.Status != r.Status {
		t.Fatalf("streamed %q (%s), not streamed %q", text, final.RawJSON(), r.OutputText())
	}

	// A short limit: incomplete, with the reason, streamed and not.
	p.MaxOutputTokens = openai.Int(3)
	r, err = es.client.Responses.New(ctx, p, seed)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != "incomplete" || r.IncompleteDetails.Reason != "max_output_tokens" || r.Usage.OutputTokens != 3 {
		t.Fatalf("short: %s", r.RawJSON())
	}
	final, _, types = streamResponse(t, es.client, p, seed)
	if types[len(types)-1] != "response.incomplete" || final.IncompleteDetails.Reason != "max_output_tokens" {
		t.Fatalf("short, streamed: %v %s", types, final.RawJSON())
	}
}

// TestSDKResponsesJSONSchema: text.format json_schema (flat: name, schema and strict
// beside the type) constrains the output, which validates against the schema,
// streamed and not; a strict schema outside the subset is a 400 naming
// text.format.schema.
func TestSDKResponsesJSONSchema(t *testing.T) {
	es := startResponsesServer(t)
	ctx := context.Background()
	var schema map[string]any
	json.Unmarshal([]byte(weatherSchema), &schema)
	v := compileSchema(t, weatherSchema)
	p := responses.ResponseNewParams{
		Model: "tiny", Input: textInput("The weather?"), MaxOutputTokens: openai.Int(200),
		Text: responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{
			OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{Name: "weather", Schema: schema, Strict: openai.Bool(true)}}},
	}
	for seed := 1; seed <= 2; seed++ {
		r, err := es.client.Responses.New(ctx, p, option.WithJSONSet("seed", seed))
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != "completed" || r.Text.Format.Type != "json_schema" || r.Text.Format.Name != "weather" {
			t.Fatalf("seed %d: %s", seed, r.RawJSON())
		}
		validate(t, v, r.OutputText())
		final, text, _ := streamResponse(t, es.client, p, option.WithJSONSet("seed", seed))
		if text != r.OutputText() || final.OutputText() != text {
			t.Fatalf("seed %d: streamed %q, not streamed %q", seed, text, r.OutputText())
		}
	}
	p.Text.Format.OfJSONSchema.Schema = map[string]any{"type": "object", "patternProperties": map[string]any{"^x": map[string]any{"type": "string"}}}
	_, err := es.client.Responses.New(ctx, p)
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Param != "text.format.schema" {
		t.Fatalf("unsupported schema: %v", err)
	}
}

func respWeatherTools() []responses.ToolUnionParam {
	var params map[string]any
	json.Unmarshal([]byte(weatherParams), &params)
	return []responses.ToolUnionParam{
		{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Description: openai.String("The weather in a city"), Parameters: params, Strict: openai.Bool(true)}},
		{OfFunction: &responses.FunctionToolParam{Name: "get_time", Description: openai.String("The time now"), Strict: openai.Bool(false)}},
	}
}

// TestSDKResponsesToolRoundTrip: a named tool_choice gives a function_call item
// (fc_ id, call_id, name, arguments that validate), streamed the same through
// function_call_arguments deltas; its output sent back through previous_response_id
// and through the whole conversation as input gives the same answer for the same
// seed, in text (tool_choice none).
func TestSDKResponsesToolRoundTrip(t *testing.T) {
	es := startResponsesServer(t)
	ctx := context.Background()
	v := compileSchema(t, weatherParams)
	ask := responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("What is the weather in Paris?", responses.EasyInputMessageRoleUser)}}
	p := responses.ResponseNewParams{
		Model: "toolsm", Input: ask, Tools: respWeatherTools(), MaxOutputTokens: openai.Int(120), Temperature: openai.Float(0.8),
		ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: "get_weather"}},
	}
	seed := option.WithJSONSet("seed", 3)
	r, err := es.client.Responses.New(ctx, p, seed)
	if err != nil {
		t.Fatal(err)
	}
	var call responses.ResponseFunctionToolCall
	for _, it := range r.Output {
		if it.Type == "function_call" {
			call = it.AsFunctionCall()
		}
	}
	if call.Name != "get_weather" || !strings.HasPrefix(call.ID, "fc_") || call.CallID == "" || call.Status != "completed" || r.Status != "completed" {
		t.Fatalf("response %s", r.RawJSON())
	}
	validate(t, v, call.Arguments)
	final, _, types := streamResponse(t, es.client, p, seed)
	args := 0
	for _, ty := range types {
		if ty == "response.function_call_arguments.delta" {
			args++
		}
	}
	if args < 2 || final.Output[len(final.Output)-1].AsFunctionCall().Arguments != call.Arguments {
		t.Fatalf("streamed: %d argument deltas, %s", args, final.RawJSON())
	}

	result := responses.ResponseInputItemParamOfFunctionCallOutput(call.CallID, `{"temperature": 21, "sky": "clear"}`)
	none := responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsNone)}
	next := responses.ResponseNewParams{
		Model: "toolsm", PreviousResponseID: openai.String(r.ID), Tools: respWeatherTools(), ToolChoice: none,
		MaxOutputTokens: openai.Int(16), Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{result}},
	}
	a1, err := es.client.Responses.New(ctx, next, option.WithJSONSet("seed", 9))
	if err != nil {
		t.Fatal(err)
	}
	if a1.OutputText() == "" || len(a1.Output) != 1 || a1.PreviousResponseID != r.ID || a1.Usage.InputTokens <= r.Usage.InputTokens {
		t.Fatalf("answer after the call: %s", a1.RawJSON())
	}
	// The whole conversation as input, the call as the SDK round-trips it.
	conv := responses.ResponseInputParam{ask.OfInputItemList[0]}
	for _, it := range r.Output {
		if it.Type == "function_call" {
			fc := it.AsFunctionCall().ToParam()
			conv = append(conv, responses.ResponseInputItemUnionParam{OfFunctionCall: &fc})
		}
	}
	full := responses.ResponseNewParams{Model: "toolsm", Tools: respWeatherTools(), ToolChoice: none, MaxOutputTokens: openai.Int(16),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: append(conv, result)}}
	a2, err := es.client.Responses.New(ctx, full, option.WithJSONSet("seed", 9))
	if err != nil {
		t.Fatal(err)
	}
	if a2.OutputText() != a1.OutputText() || a2.Usage.InputTokens != a1.Usage.InputTokens {
		t.Fatalf("full input %q (%d tokens), previous_response_id %q (%d)", a2.OutputText(), a2.Usage.InputTokens, a1.OutputText(), a1.Usage.InputTokens)
	}
}

// TestSDKResponsesStored: a stored response is the tenant's: GET gives it back as
// answered, input_items lists its input, input_tokens counts what its usage
// reported, previous_response_id continues it with the earlier turn served from the
// prefix cache, DELETE removes it; to another tenant each is a 404, and store:
// false keeps nothing.
//
// The first turn's prompt is model.AttnF32MinPrompt tokens or more, so that both
// turns run the same attention mode on every CPU: the mode is part of the prefix
// cache's salt (engine/doc.go), and where float32 attention is the default
// (AVX-512, head size 64, as $TINY's) a shorter first turn would be binary16 and its
// blocks, rightly, no prefix of the float32 continuation's.
func TestSDKResponsesStored(t *testing.T) {
	es := startResponsesServer(t)
	ctx := context.Background()
	other := es.sdk("other")
	const instructions = "Continue the story in the same voice, one sentence at a time, keeping its names, " +
		"places and tense, and never explaining what happens; the reader should feel the story has no seams."
	p := responses.ResponseNewParams{Model: "tiny", Input: textInput("Once upon a time"), Instructions: openai.String(instructions), MaxOutputTokens: openai.Int(40)}
	r, err := es.client.Responses.New(ctx, p, option.WithJSONSet("seed", 2))
	if err != nil {
		t.Fatal(err)
	}
	if r.Usage.InputTokens < enginemodel.AttnF32MinPrompt {
		t.Fatalf("the first turn's prompt has %d tokens, fewer than model.AttnF32MinPrompt (%d): its attention mode would depend on the CPU", r.Usage.InputTokens, enginemodel.AttnF32MinPrompt)
	}
	got, err := es.client.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
	if err != nil || got.RawJSON() != r.RawJSON() {
		t.Fatalf("get: %v\n%s\nwant\n%s", err, got.RawJSON(), r.RawJSON())
	}
	page, err := es.client.Responses.InputItems.List(ctx, r.ID, responses.InputItemListParams{})
	if err != nil || len(page.Data) != 1 || page.Data[0].Type != "message" || page.Data[0].AsMessage().Content[0].Text != "Once upon a time" || page.HasMore {
		t.Fatalf("input items: %v %+v", err, page)
	}

	// input_tokens: the same body counts what the response's usage reported.
	var count struct {
		Object      string `json:"object"`
		InputTokens int64  `json:"input_tokens"`
	}
	if err := es.client.Post(ctx, "responses/input_tokens", map[string]any{"model": "tiny", "input": "Once upon a time", "instructions": instructions}, &count); err != nil {
		t.Fatal(err)
	}
	if count.Object != "response.input_tokens" || count.InputTokens != r.Usage.InputTokens {
		t.Fatalf("input_tokens %+v, usage %d", count, r.Usage.InputTokens)
	}

	// Continued: the earlier turn (its prompt and output) is the new prompt's prefix.
	// (instructions are not carried over, as OpenAI: the same ones are given again.)
	next := responses.ResponseNewParams{Model: "tiny", Input: textInput("And then?"), PreviousResponseID: openai.String(r.ID),
		Instructions: openai.String(instructions), MaxOutputTokens: openai.Int(8)}
	c, err := es.client.Responses.New(ctx, next, option.WithJSONSet("seed", 2))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first turn: %d prompt + %d output tokens; continued: %d prompt tokens, %d cached",
		r.Usage.InputTokens, r.Usage.OutputTokens, c.Usage.InputTokens, c.Usage.InputTokensDetails.CachedTokens)
	if c.Usage.InputTokensDetails.CachedTokens < r.Usage.InputTokens || c.PreviousResponseID != r.ID {
		t.Fatalf("continued: %d cached tokens, the earlier prompt %d: %s", c.Usage.InputTokensDetails.CachedTokens, r.Usage.InputTokens, c.RawJSON())
	}
	if err := es.client.Post(ctx, "responses/input_tokens", map[string]any{"model": "tiny", "input": "And then?", "previous_response_id": r.ID, "instructions": instructions}, &count); err != nil || count.InputTokens != c.Usage.InputTokens {
		t.Fatalf("input_tokens of the continuation %+v (%v), usage %d", count, err, c.Usage.InputTokens)
	}

	// Another tenant: 404 for each, and for previous_response_id.
	notFound := func(what string, err error) {
		t.Helper()
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != 404 {
			t.Errorf("%s: %v, want a 404", what, err)
		}
	}
	_, err = other.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
	notFound("other tenant's get", err)
	_, err = other.Responses.InputItems.List(ctx, r.ID, responses.InputItemListParams{})
	notFound("other tenant's input_items", err)
	notFound("other tenant's delete", other.Responses.Delete(ctx, r.ID))
	_, err = other.Responses.New(ctx, next)
	notFound("other tenant's previous_response_id", err)
	err = other.Post(ctx, "responses/input_tokens", map[string]any{"model": "tiny", "input": "x", "previous_response_id": r.ID}, &count)
	notFound("other tenant's input_tokens with previous_response_id", err)

	// Deleted: gone (and the other tenant's attempt removed nothing).
	if err := es.client.Responses.Delete(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	_, err = es.client.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
	notFound("deleted", err)

	// store: false keeps nothing.
	p.Store = openai.Bool(false)
	r, err = es.client.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = es.client.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
	notFound("store false", err)
}

// TestResponsesInputTokensIsThePrompt: POST /v1/responses/input_tokens counts the
// prompt the same conversation has through chat/completions (its usage's
// prompt_tokens), tools included, on the model that would serve it; a field at fault
// is named as the Responses API names it.
func TestResponsesInputTokensIsThePrompt(t *testing.T) {
	es := startResponsesServer(t)
	ctx := context.Background()
	var params map[string]any
	json.Unmarshal([]byte(weatherParams), &params)
	for _, model := range []string{"tiny", "toolsm"} {
		cc, err := es.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("sys"), openai.UserMessage("What is the weather in Paris?")},
			Tools:     []openai.ChatCompletionToolParam{{Function: openai.FunctionDefinitionParam{Name: "get_weather", Parameters: params}}},
			MaxTokens: openai.Int(1),
		})
		if err != nil {
			t.Fatal(err)
		}
		var count struct {
			Object      string `json:"object"`
			InputTokens int64  `json:"input_tokens"`
		}
		body := map[string]any{"model": model, "instructions": "sys", "input": "What is the weather in Paris?",
			"tools": []any{map[string]any{"type": "function", "name": "get_weather", "parameters": params}}}
		if err := es.client.Post(ctx, "responses/input_tokens", body, &count); err != nil {
			t.Fatal(err)
		}
		if count.Object != "response.input_tokens" || count.InputTokens != cc.Usage.PromptTokens || count.InputTokens == 0 {
			t.Errorf("%s: input_tokens %+v, chat's prompt_tokens %d", model, count, cc.Usage.PromptTokens)
		}
	}
	err := es.client.Post(ctx, "responses/input_tokens", map[string]any{"model": "tiny", "input": "x",
		"text": map[string]any{"format": map[string]any{"type": "json_schema", "schema": map[string]any{}}}}, nil)
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Param != "text.format.name" {
		t.Fatalf("a json_schema without a name: %v", err)
	}
}

// TestResponsesContinuedOnAnotherProcess: with the responses in Redis (as `lmlite
// serve` keeps them with redis:), a response stored through one gateway is read,
// listed and continued (previous_response_id) through another, and stays the
// tenant's: another tenant gets a 404 there too.
func TestResponsesContinuedOnAnotherProcess(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	gws, keys := startSharedGatewaysWith(t, rs, 2, func(i int, rc *redis.Client, o *Options) {
		o.Responses = respstore.NewRedis(rc, "gwtest:", respstore.Options{})
	})
	ctx := context.Background()
	client := func(g *sharedGateway, tenant string) openai.Client {
		return openai.NewClient(option.WithBaseURL(g.url+"/v1/"), option.WithAPIKey(keys[tenant]), option.WithMaxRetries(0))
	}
	c0 := client(gws[0], "acme")
	first, err := c0.Responses.New(ctx, responses.ResponseNewParams{
		Model: "tiny", Input: textInput("hello"), Instructions: openai.String("sys"), MaxOutputTokens: openai.Int(3)})
	if err != nil {
		t.Fatal(err)
	}
	c1 := client(gws[1], "acme")
	got, err := c1.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	if err != nil || got.RawJSON() != first.RawJSON() {
		t.Fatalf("get on the other process: %v", err)
	}
	next, err := c1.Responses.New(ctx, responses.ResponseNewParams{Model: "tiny", Input: textInput("again"),
		Instructions: openai.String("sys"), PreviousResponseID: openai.String(first.ID), MaxOutputTokens: openai.Int(2)})
	if err != nil {
		t.Fatal(err)
	}
	// The fake engine's prompt is the ChatML text, a token a byte (and BOS): the
	// earlier turn, its output, then the new input.
	want := "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n" + first.OutputText() +
		"<|im_end|>\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n"
	if next.Usage.InputTokens != int64(len(want)+1) || next.OutputText() != "w0 w1 " {
		t.Fatalf("continued on the other process: %d input tokens (want %d), %q", next.Usage.InputTokens, len(want)+1, next.OutputText())
	}
	items, err := c0.Responses.InputItems.List(ctx, next.ID, responses.InputItemListParams{})
	if err != nil || len(items.Data) != 1 || items.Data[0].AsMessage().Content[0].Text != "again" {
		t.Fatalf("input items of the continuation: %v %+v", err, items)
	}
	small := client(gws[1], "small")
	_, err = small.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 404 {
		t.Fatalf("another tenant on the other process: %v", err)
	}
}
