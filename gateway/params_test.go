package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/shared"

	"github.com/lmlite/lmlite/engine/tokenizer"
)

// sdkParam is the param of the SDK's error err, failing unless it is a 400.
func sdkParam(t *testing.T, err error) string {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 {
		t.Fatalf("want a 400, got %v", err)
	}
	return ae.Param
}

// TestSDKAcceptsCurrentClientParams: the parameters current SDKs send are accepted
// (reasoning_effort, verbosity, store, metadata, prompt_cache_key, user,
// safety_identifier), bad enum values are 400s naming them, and an unknown member is
// still a 400 naming it.
func TestSDKAcceptsCurrentClientParams(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	c := ts.client("acme")
	ctx := context.Background()
	p := openai.ChatCompletionNewParams{
		Model: "tiny", Messages: user("hi"), MaxTokens: openai.Int(3),
		ReasoningEffort: shared.ReasoningEffortLow, Store: openai.Bool(true),
		Metadata: shared.Metadata{"app": "test"}, PromptCacheKey: openai.String("conv-1"),
		User: openai.String("end-user-1"), SafetyIdentifier: openai.String("safe-1"),
	}
	if _, err := c.Chat.Completions.New(ctx, p, option.WithJSONSet("verbosity", "low")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ key, value string }{{"reasoning_effort", "extreme"}, {"verbosity", "loud"}} {
		_, err := c.Chat.Completions.New(ctx, p, option.WithJSONSet(bad.key, bad.value))
		if got := sdkParam(t, err); got != bad.key {
			t.Errorf("%s %q: param %q", bad.key, bad.value, got)
		}
	}
	_, err := c.Chat.Completions.New(ctx, p, option.WithJSONSet("frobnicate", true))
	if got := sdkParam(t, err); got != "frobnicate" {
		t.Errorf("unknown member: param %q", got)
	}
}

// TestUserAndSafetyIdentifierAreHashedInTheLedger: user and safety_identifier are
// kept with the ledger entry as keyed hashes, never as given; the same value of the
// same tenant hashes the same, another tenant's the same value differently.
func TestUserAndSafetyIdentifierAreHashedInTheLedger(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	ctx := context.Background()
	for _, tenant := range []string{"acme", "acme", "rich"} {
		c := ts.client(tenant)
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "tiny", Messages: user("hi"), MaxTokens: openai.Int(2),
			User: openai.String("alice@example.com"), SafetyIdentifier: openai.String("user-42"),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	led := ts.ledger()
	if len(led) != 3 {
		t.Fatalf("%d entries", len(led))
	}
	for _, e := range led {
		if len(e.User) != 32 || len(e.SafetyIdentifier) != 32 || e.User == e.SafetyIdentifier ||
			strings.Contains(e.User, "alice") || strings.Contains(e.SafetyIdentifier, "user-42") {
			t.Fatalf("entry %+v", e)
		}
	}
	if led[0].User != led[1].User || led[0].SafetyIdentifier != led[1].SafetyIdentifier {
		t.Errorf("the same tenant's same user hashes differently: %+v / %+v", led[0], led[1])
	}
	if led[0].User == led[2].User || led[0].SafetyIdentifier == led[2].SafetyIdentifier {
		t.Errorf("two tenants' same user hash alike: %+v / %+v", led[0], led[2])
	}
}

// TestPromptCacheKeyAffinity: a prompt_cache_key gives the engine request an
// affinity (the same key of the same tenant, the same affinity; another tenant's
// same key, another); without a key there is none.
func TestPromptCacheKeyAffinity(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	ctx := context.Background()
	aff := func(tenant, key string) uint64 {
		p := openai.ChatCompletionNewParams{Model: "tiny", Messages: user("hi"), MaxTokens: openai.Int(2)}
		if key != "" {
			p.PromptCacheKey = openai.String(key)
		}
		c := ts.client(tenant)
		if _, err := c.Chat.Completions.New(ctx, p); err != nil {
			t.Fatal(err)
		}
		return ts.eng.lastRequest().Affinity
	}
	a1, a2, b, other, none := aff("acme", "k1"), aff("acme", "k1"), aff("acme", "k2"), aff("rich", "k1"), aff("acme", "")
	if a1 == 0 || a1 != a2 || a1 == b || a1 == other || none != 0 {
		t.Errorf("affinities: k1 %x %x, k2 %x, other tenant's k1 %x, none %x", a1, a2, b, other, none)
	}
}

// TestBadNewParamsNameTheField: logit_bias, legacy functions and token-id prompts
// refused by their shape name the field.
func TestBadNewParamsNameTheField(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	key := ts.keys["acme"]
	msgs := `"messages": [{"role":"user","content":"x"}]`
	many := make([]string, 301)
	for i := range many {
		many[i] = `"` + strconv.Itoa(i) + `": 1`
	}
	for _, c := range []struct{ name, path, body, param string }{
		{"logit_bias key", "/v1/chat/completions", `{"model":"tiny",` + msgs + `,"logit_bias":{"abc":1}}`, "logit_bias"},
		{"logit_bias negative id", "/v1/chat/completions", `{"model":"tiny",` + msgs + `,"logit_bias":{"-3":1}}`, "logit_bias"},
		{"logit_bias range", "/v1/chat/completions", `{"model":"tiny",` + msgs + `,"logit_bias":{"5":101}}`, "logit_bias"},
		{"logit_bias too many", "/v1/chat/completions", `{"model":"tiny",` + msgs + `,"logit_bias":{` + strings.Join(many, ",") + `}}`, "logit_bias"},
		{"logit_bias on an engine without ids", "/v1/chat/completions", `{"model":"tiny",` + msgs + `,"logit_bias":{"5":1}}`, "logit_bias"},
		{"function_call mode", "/v1/chat/completions", `{"model":"tiny",` + msgs + `,"functions":[{"name":"f"}],"function_call":"always"}`, "function_call"},
		{"function_call unknown", "/v1/chat/completions", `{"model":"tiny",` + msgs + `,"functions":[{"name":"f"}],"function_call":{"name":"g"}}`, "function_call"},
		{"functions without name", "/v1/chat/completions", `{"model":"tiny",` + msgs + `,"functions":[{"description":"d"}]}`, "functions[0].name"},
		{"functions and tools", "/v1/chat/completions", `{"model":"tiny",` + msgs + `,"functions":[{"name":"f"}],"tools":[{"type":"function","function":{"name":"f"}}]}`, "functions"},
		{"function role without name", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"function","content":"x"}]}`, "messages[0].name"},
		{"prompt ids batched", "/v1/completions", `{"model":"tiny","prompt":[[1,2],[3]]}`, "prompt"},
		{"prompt ids negative", "/v1/completions", `{"model":"tiny","prompt":[1,-2]}`, "prompt"},
		{"prompt ids with echo", "/v1/completions", `{"model":"tiny","prompt":[1,2],"echo":true}`, "echo"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := ts.post(c.path, key, c.body)
			if resp.StatusCode != 400 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if e := parseErr(t, body); e.Error.Param == nil || *e.Error.Param != c.param {
				t.Errorf("param %v, want %q: %s", e.Error.Param, c.param, body)
			}
		})
	}
}

// normalToken is a token of tok that is normal text, not a control token, whose
// piece is plain letters.
func normalToken(t *testing.T, tok *tokenizer.Tokenizer) (int32, string) {
	t.Helper()
	for id := int32(tok.VocabSize() / 2); id < int32(tok.VocabSize()); id++ {
		p := tok.Piece(id)
		if tok.Type(id) == tokenizer.TypeNormal && len(p) >= 3 && strings.Trim(p, "abcdefghijklmnopqrstuvwxyz") == "" {
			return id, p
		}
	}
	t.Fatal("no plain token")
	return 0, ""
}

// TestLogitBiasWithTheEngine: on the real engine, greedy with +100 on a token writes
// that token every step (chat and completions, streamed and not); a positive bias on
// a control token and an id outside the vocabulary are 400s naming logit_bias; a
// negative bias on a control token is allowed.
func TestLogitBiasWithTheEngine(t *testing.T) {
	es := startEngineServer(t)
	ctx := context.Background()
	tok, err := es.block.Tokenizer("tiny")
	if err != nil {
		t.Fatal(err)
	}
	id, piece := normalToken(t, tok)
	bias := map[string]int64{strconv.Itoa(int(id)): 100}
	p := openai.ChatCompletionNewParams{Model: "tiny", Messages: user("Tell me a story"), MaxTokens: openai.Int(6),
		Temperature: openai.Float(0), LogitBias: bias}
	resp, err := es.client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat(piece, 6)
	if got := resp.Choices[0].Message.Content; strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("chat with +100 on %d (%q): %q", id, piece, got)
	}
	streamed, _ := collect(t, es.client, p)
	if streamed.Choices[0].Message.Content != resp.Choices[0].Message.Content {
		t.Errorf("streamed %q, not streamed %q", streamed.Choices[0].Message.Content, resp.Choices[0].Message.Content)
	}
	cr, err := es.client.Completions.New(ctx, openai.CompletionNewParams{Model: "tiny",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(4),
		Temperature: openai.Float(0), LogitBias: bias})
	if err != nil || strings.TrimSpace(cr.Choices[0].Text) != strings.TrimSpace(strings.Repeat(piece, 4)) {
		t.Errorf("completions with +100: %v %+v", err, cr)
	}
	// Batch-invariant: with a seed and a milder bias, choice 0 of n = 3 (run beside
	// the others) is the request alone, token for token.
	mild := openai.ChatCompletionNewParams{Model: "tiny", Messages: user("Tell me a story"), MaxTokens: openai.Int(12),
		Temperature: openai.Float(0.9), Seed: openai.Int(11), LogitBias: map[string]int64{strconv.Itoa(int(id)): 4}}
	alone, err := es.client.Chat.Completions.New(ctx, mild)
	if err != nil {
		t.Fatal(err)
	}
	mild.N = openai.Int(3)
	batched, err := es.client.Chat.Completions.New(ctx, mild)
	if err != nil {
		t.Fatal(err)
	}
	if batched.Choices[0].Message.Content != alone.Choices[0].Message.Content {
		t.Errorf("with logit_bias, choice 0 of 3 %q, alone %q", batched.Choices[0].Message.Content, alone.Choices[0].Message.Content)
	}
	// A control token: a positive bias is refused, a negative one taken.
	eos := strconv.Itoa(int(tok.EOS()))
	p.LogitBias = map[string]int64{eos: 5}
	_, err = es.client.Chat.Completions.New(ctx, p)
	if got := sdkParam(t, err); got != "logit_bias" {
		t.Errorf("positive bias on EOS: param %q", got)
	}
	if bos := tok.BOS(); bos >= 0 && bos != tok.EOS() {
		p.LogitBias = map[string]int64{strconv.Itoa(int(bos)): 1}
		_, err = es.client.Chat.Completions.New(ctx, p)
		if got := sdkParam(t, err); got != "logit_bias" {
			t.Errorf("positive bias on BOS: param %q", got)
		}
	}
	p.LogitBias = map[string]int64{eos: -100}
	if _, err := es.client.Chat.Completions.New(ctx, p); err != nil {
		t.Errorf("negative bias on EOS: %v", err)
	}
	p.LogitBias = map[string]int64{strconv.Itoa(tok.VocabSize()): 1}
	_, err = es.client.Chat.Completions.New(ctx, p)
	if got := sdkParam(t, err); got != "logit_bias" {
		t.Errorf("id outside the vocabulary: param %q", got)
	}
}

// TestPromptTokenIDsWithTheEngine: a completions prompt of token ids (an array, and
// an array holding one array) generates what the same prompt as text does; an id
// outside the vocabulary and a control token other than BOS are 400s naming prompt.
func TestPromptTokenIDsWithTheEngine(t *testing.T) {
	es := startEngineServer(t)
	ctx := context.Background()
	text := "Once upon a time there was a dragon"
	ids, err := es.block.Tokenize("tiny", text)
	if err != nil {
		t.Fatal(err)
	}
	ids64 := make([]int64, len(ids))
	for i, x := range ids {
		ids64[i] = int64(x)
	}
	run := func(pr openai.CompletionNewParamsPromptUnion) (*openai.Completion, error) {
		return es.client.Completions.New(ctx, openai.CompletionNewParams{Model: "tiny", Prompt: pr,
			MaxTokens: openai.Int(8), Temperature: openai.Float(0)})
	}
	want, err := run(openai.CompletionNewParamsPromptUnion{OfString: openai.String(text)})
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range []openai.CompletionNewParamsPromptUnion{{OfArrayOfTokens: ids64}, {OfArrayOfTokenArrays: [][]int64{ids64}}} {
		got, err := run(pr)
		if err != nil {
			t.Fatal(err)
		}
		if got.Choices[0].Text != want.Choices[0].Text || got.Usage.PromptTokens != want.Usage.PromptTokens {
			t.Errorf("token ids: %q (%d prompt tokens), text: %q (%d)", got.Choices[0].Text, got.Usage.PromptTokens,
				want.Choices[0].Text, want.Usage.PromptTokens)
		}
	}
	tok, _ := es.block.Tokenizer("tiny")
	for _, bad := range [][]int64{{ids64[0], int64(tok.VocabSize())}, {ids64[0], int64(tok.EOS()), ids64[1]}} {
		_, err := run(openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: bad})
		if got := sdkParam(t, err); got != "prompt" {
			t.Errorf("prompt %v: param %q", bad, got)
		}
	}
}

// TestSDKLegacyFunctions: functions and function_call (the deprecated API) are
// served as tools: a named function_call answers message.function_call with
// finish_reason "function_call", streamed as delta.function_call; the call and the
// function's result (role "function") go back into the next turn.
func TestSDKLegacyFunctions(t *testing.T) {
	es := startEngineServer(t)
	ctx := context.Background()
	v := compileSchema(t, weatherParams)
	var params map[string]any
	if err := json.Unmarshal([]byte(weatherParams), &params); err != nil {
		t.Fatal(err)
	}
	p := openai.ChatCompletionNewParams{
		Model: "tiny", Messages: user("What is the weather in Paris?"), MaxTokens: openai.Int(120), Seed: openai.Int(3), Temperature: openai.Float(0.8),
		Functions: []openai.ChatCompletionNewParamsFunction{
			{Name: "get_weather", Description: openai.String("The weather in a city"), Parameters: params},
			{Name: "get_time"},
		},
		FunctionCall: openai.ChatCompletionNewParamsFunctionCallUnion{OfFunctionCallOption: &openai.ChatCompletionFunctionCallOptionParam{Name: "get_weather"}},
	}
	resp, err := es.client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	c := resp.Choices[0]
	if c.FinishReason != "function_call" || c.Message.FunctionCall.Name != "get_weather" || len(c.Message.ToolCalls) != 0 {
		t.Fatalf("finish %q, message %+v", c.FinishReason, c.Message)
	}
	validate(t, v, c.Message.FunctionCall.Arguments)
	streamed, chunks := collect(t, es.client, p)
	name, args := "", ""
	for _, ch := range chunks {
		for _, d := range ch.Choices {
			name += d.Delta.FunctionCall.Name
			args += d.Delta.FunctionCall.Arguments
			if len(d.Delta.ToolCalls) > 0 {
				t.Fatalf("a tool_calls delta for a functions request: %+v", d.Delta)
			}
		}
	}
	if name != "get_weather" || args != c.Message.FunctionCall.Arguments || streamed.Choices[0].FinishReason != "function_call" {
		t.Fatalf("streamed %q(%s) finish %q; not streamed %s", name, args, streamed.Choices[0].FinishReason, c.Message.FunctionCall.Arguments)
	}
	// The next turn: the assistant's function_call and the function's result.
	next := p
	next.FunctionCall = openai.ChatCompletionNewParamsFunctionCallUnion{OfFunctionCallMode: openai.String("none")}
	next.Messages = append(append([]openai.ChatCompletionMessageParamUnion{}, p.Messages...),
		openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
			FunctionCall: openai.ChatCompletionAssistantMessageParamFunctionCall{Name: "get_weather", Arguments: c.Message.FunctionCall.Arguments}}},
		openai.ChatCompletionMessageParamUnion{OfFunction: &openai.ChatCompletionFunctionMessageParam{Name: "get_weather", Content: openai.String(`{"temperature": 21}`)}})
	next.MaxTokens = openai.Int(8)
	answer, err := es.client.Chat.Completions.New(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	if a := answer.Choices[0]; a.FinishReason == "function_call" || a.Message.FunctionCall.Name != "" || answer.Usage.PromptTokens <= resp.Usage.PromptTokens {
		t.Fatalf("answer after the function's result: %+v (prompt %d tokens, before %d)", a, answer.Usage.PromptTokens, resp.Usage.PromptTokens)
	}
}
