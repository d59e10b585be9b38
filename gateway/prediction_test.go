package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/tenancy"
)

func startStoriesServer(t *testing.T) *engineServer {
	t.Helper()
	return startEngine(t, `
ledger: {sync: process}
models:
  - {id: stories, path: $STORIES, max_model_len: 512, max_concurrency: 8, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.002}
tiers:
  fast: [{model: stories, quality: 0.5}]
plans:
  open: {requests_per_second: 1000, burst: 1000, max_concurrency: 100}
tenants:
  - {id: acme, plan: open}
  - {id: pinch, plan: open, overrides: {daily_budget_usd: 0.0005}}
`, engine.Config{})
}

// choiceLogprobs is a choice's tokens and logprobs, bit for bit, as text.
func choiceLogprobs(c openai.ChatCompletionChoice) string {
	s := ""
	for _, lp := range c.Logprobs.Content {
		s += fmt.Sprintf("%q:%x;", lp.Token, lp.Logprob)
		for _, tl := range lp.TopLogprobs {
			s += fmt.Sprintf("%q:%x,", tl.Token, tl.Logprob)
		}
	}
	return s
}

// TestSDKPrediction: through the official SDK's Prediction (a string, and text
// parts), a chat request with the model's own answer as its prediction (stories260K)
// gives the answer without one — content, logprobs and top logprobs, finish reason,
// completion tokens — greedy and with n = 3 seeded sampling; usage reports
// completion_tokens_details.accepted_prediction_tokens (most of the answer, greedy)
// and rejected_prediction_tokens, and streaming reports them in the usage chunk.
func TestSDKPrediction(t *testing.T) {
	es := startStoriesServer(t)
	ctx := context.Background()
	params := func(n int, temp float64) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{
			Model:       "stories",
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Once upon a time, there was a little girl named Lily.")},
			MaxTokens:   openai.Int(120),
			Temperature: openai.Float(temp),
			Seed:        openai.Int(9),
			N:           openai.Int(int64(n)),
			Logprobs:    openai.Bool(true),
			TopLogprobs: openai.Int(3),
		}
	}
	plain, err := es.client.Chat.Completions.New(ctx, params(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	answer := plain.Choices[0].Message.Content
	if plain.Usage.CompletionTokensDetails.JSON.AcceptedPredictionTokens.Valid() {
		t.Errorf("completion_tokens_details reported without a prediction: %s", plain.Usage.RawJSON())
	}
	half := len(answer) / 2
	for _, pred := range []openai.ChatCompletionPredictionContentParam{
		{Content: openai.ChatCompletionPredictionContentContentUnionParam{OfString: openai.String(answer)}},
		{Content: openai.ChatCompletionPredictionContentContentUnionParam{OfArrayOfContentParts: []openai.ChatCompletionContentPartTextParam{
			{Text: answer[:half]}, {Text: answer[half:]}}}},
	} {
		p := params(1, 0)
		p.Prediction = pred
		got, err := es.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		c, w := got.Choices[0], plain.Choices[0]
		if c.Message.Content != w.Message.Content || choiceLogprobs(c) != choiceLogprobs(w) || c.FinishReason != w.FinishReason ||
			got.Usage.CompletionTokens != plain.Usage.CompletionTokens+got.Usage.CompletionTokensDetails.RejectedPredictionTokens {
			t.Fatalf("with a prediction: %q (%s, %d tokens), without: %q (%s, %d tokens)", c.Message.Content, c.FinishReason,
				got.Usage.CompletionTokens, w.Message.Content, w.FinishReason, plain.Usage.CompletionTokens)
		}
		d := got.Usage.CompletionTokensDetails
		if !d.JSON.AcceptedPredictionTokens.Valid() || !d.JSON.RejectedPredictionTokens.Valid() || d.AcceptedPredictionTokens < got.Usage.CompletionTokens/2 {
			t.Fatalf("usage %s: want most of %d tokens accepted", got.Usage.RawJSON(), got.Usage.CompletionTokens)
		}
	}

	// n = 3, seeded sampling: each choice as without the prediction.
	want, err := es.client.Chat.Completions.New(ctx, params(3, 0.8))
	if err != nil {
		t.Fatal(err)
	}
	p := params(3, 0.8)
	p.Prediction.Content.OfString = openai.String(answer)
	got, err := es.client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want.Choices {
		if got.Choices[i].Message.Content != want.Choices[i].Message.Content || choiceLogprobs(got.Choices[i]) != choiceLogprobs(want.Choices[i]) {
			t.Fatalf("choice %d differs with a prediction:\n%q\n%q", i, got.Choices[i].Message.Content, want.Choices[i].Message.Content)
		}
	}
	if d := got.Usage.CompletionTokensDetails; d.AcceptedPredictionTokens+d.RejectedPredictionTokens == 0 {
		t.Fatalf("n=3: nothing drafted from the prediction: %s", got.Usage.RawJSON())
	}

	// Streamed, with include_usage: the same text, and the details in the usage chunk.
	p = params(1, 0)
	p.Prediction.Content.OfString = openai.String(answer)
	p.StreamOptions.IncludeUsage = openai.Bool(true)
	acc, chunks := collect(t, es.client, p)
	last := chunks[len(chunks)-1].Usage // the accumulator keeps no completion_tokens_details
	if acc.Choices[0].Message.Content != answer || last.CompletionTokensDetails.AcceptedPredictionTokens == 0 {
		t.Fatalf("streamed: %q, usage %s", acc.Choices[0].Message.Content, last.RawJSON())
	}
}

// TestPredictionCompletions: /v1/completions takes the same prediction member (set
// with the SDK's raw JSON option: its completion params have none) with the same
// output.
func TestPredictionCompletions(t *testing.T) {
	es := startStoriesServer(t)
	ctx := context.Background()
	p := openai.CompletionNewParams{Model: "stories", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(80), Temperature: openai.Float(0)}
	want, err := es.client.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := es.client.Completions.New(ctx, p, option.WithJSONSet("prediction", map[string]any{"type": "content", "content": want.Choices[0].Text}))
	if err != nil {
		t.Fatal(err)
	}
	if got.Choices[0].Text != want.Choices[0].Text || got.Usage.CompletionTokensDetails.AcceptedPredictionTokens == 0 {
		t.Fatalf("with a prediction %q (usage %s), without %q", got.Choices[0].Text, got.Usage.RawJSON(), want.Choices[0].Text)
	}
}

// TestPredictionInvalid: a malformed prediction is a 400 naming the member at fault,
// on chat and on completions.
func TestPredictionInvalid(t *testing.T) {
	es := startStoriesServer(t)
	ctx := context.Background()
	for _, c := range []struct {
		pred  any
		param string
	}{
		{"the text", "prediction"},
		{[]string{"a"}, "prediction"},
		{map[string]any{"type": "content", "content": "x", "extra": 1}, "prediction"},
		{map[string]any{"content": "x"}, "prediction.type"},
		{map[string]any{"type": "text", "content": "x"}, "prediction.type"},
		{map[string]any{"type": "content"}, "prediction.content"},
		{map[string]any{"type": "content", "content": 5}, "prediction.content"},
		{map[string]any{"type": "content", "content": []any{map[string]any{"type": "text", "text": "a"}, map[string]any{"type": "image_url", "image_url": "x"}}}, "prediction.content"},
		{map[string]any{"type": "content", "content": []any{map[string]any{"type": "image", "text": "a"}}}, "prediction.content[0].type"},
		{map[string]any{"type": "content", "content": strings.Repeat("a", MaxPredictionBytes+1)}, "prediction.content"},
		{map[string]any{"type": "content", "content": []any{map[string]any{"type": "text", "text": strings.Repeat("a", MaxPredictionBytes)},
			map[string]any{"type": "text", "text": "b"}}}, "prediction.content"},
	} {
		name := fmt.Sprint(c.pred)
		name = name[:min(len(name), 120)]
		for _, endpoint := range []string{"chat", "completions"} {
			var err error
			opt := option.WithJSONSet("prediction", c.pred)
			if endpoint == "chat" {
				_, err = es.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "stories",
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(2)}, opt)
			} else {
				_, err = es.client.Completions.New(ctx, openai.CompletionNewParams{Model: "stories",
					Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, MaxTokens: openai.Int(2)}, opt)
			}
			var ae *openai.Error
			if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Param != c.param {
				t.Errorf("%s, prediction %s: %v, want a 400 naming %s", endpoint, name, err, c.param)
			}
		}
	}
	// At the limit, a prediction is taken.
	_, err := es.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "stories",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(2)},
		option.WithJSONSet("prediction", map[string]any{"type": "content", "content": strings.Repeat("a", MaxPredictionBytes)}))
	if err != nil {
		t.Fatalf("a prediction of %d bytes: %v", MaxPredictionBytes, err)
	}
}

// perturbWords rewrites every other run of 6 words of text (reversed and
// upper-cased): a prediction the output leaves and comes back to, so that some of
// its drafts are rejected.
func perturbWords(text string) string {
	w := strings.Fields(text)
	for i := 6; i < len(w); i += 12 {
		run := w[i:min(i+6, len(w))]
		slices.Reverse(run)
		for k := range run {
			run[k] = strings.ToUpper(run[k])
		}
	}
	return strings.Join(w, " ")
}

// TestPredictionRejectedBilled: as OpenAI does, a prediction's rejected tokens
// count as completion tokens and are billed at the completion price (stories260K, a
// half-perturbed prediction of the model's own answer): the answer is the plain one,
// usage.completion_tokens is its tokens plus rejected_prediction_tokens, plain and
// streamed, and the ledger charges that many; with n = 2 both choices' rejected
// tokens are counted and billed.
func TestPredictionRejectedBilled(t *testing.T) {
	es := startStoriesServer(t)
	ctx := context.Background()
	p := openai.ChatCompletionNewParams{Model: "stories", Messages: []openai.ChatCompletionMessageParamUnion{
		openai.UserMessage("Once upon a time, there was a little girl named Lily.")}, MaxTokens: openai.Int(150), Temperature: openai.Float(0)}
	plain, err := es.client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Prediction.Content.OfString = openai.String(perturbWords(plain.Choices[0].Message.Content))
	got, err := es.client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	rejected := got.Usage.CompletionTokensDetails.RejectedPredictionTokens
	if got.Choices[0].Message.Content != plain.Choices[0].Message.Content || rejected == 0 ||
		got.Usage.CompletionTokens != plain.Usage.CompletionTokens+rejected || got.Usage.TotalTokens != got.Usage.PromptTokens+got.Usage.CompletionTokens {
		t.Fatalf("with a prediction: %q, usage %s; without: %q, usage %s", got.Choices[0].Message.Content, got.Usage.RawJSON(),
			plain.Choices[0].Message.Content, plain.Usage.RawJSON())
	}
	var led []tenancy.Entry
	es.store.Ledger(func(e tenancy.Entry) error { led = append(led, e); return nil })
	e := led[len(led)-1]
	if want := es.srv.models["stories"].price.Cost(int(got.Usage.PromptTokens), int(got.Usage.CompletionTokens)); e.CompletionTokens != int(got.Usage.CompletionTokens) || e.Cost != want {
		t.Fatalf("ledger: %d completion tokens, cost %v; want %d, %v", e.CompletionTokens, e.Cost, got.Usage.CompletionTokens, want)
	}

	p.StreamOptions.IncludeUsage = openai.Bool(true)
	_, chunks := collect(t, es.client, p)
	u := chunks[len(chunks)-1].Usage
	if u.CompletionTokensDetails.RejectedPredictionTokens == 0 || u.CompletionTokens != plain.Usage.CompletionTokens+u.CompletionTokensDetails.RejectedPredictionTokens {
		t.Fatalf("streamed usage %s, plain %d completion tokens", u.RawJSON(), plain.Usage.CompletionTokens)
	}

	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
	p.N = openai.Int(2)
	two, err := es.client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	d := two.Usage.CompletionTokensDetails
	if d.RejectedPredictionTokens == 0 || two.Usage.CompletionTokens != 2*plain.Usage.CompletionTokens+d.RejectedPredictionTokens {
		t.Fatalf("n=2 (greedy: two copies of the plain answer): usage %s, plain %d completion tokens", two.Usage.RawJSON(), plain.Usage.CompletionTokens)
	}
}

// TestPredictionReservesWorstCase: a request reserves its rejected prediction
// tokens' worst case (the prediction's bytes + 1 tokens, at the completion price)
// before it runs: a tenant whose budget covers the output limit but not the
// prediction's worst case besides is refused with 429 insufficient_quota, and the
// same request without the prediction runs.
func TestPredictionReservesWorstCase(t *testing.T) {
	es := startStoriesServer(t)
	ctx := context.Background()
	pinch := es.sdk("pinch")
	p := openai.ChatCompletionNewParams{Model: "stories", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Once upon a time")},
		MaxTokens: openai.Int(40), Temperature: openai.Float(0)}
	if _, err := pinch.Chat.Completions.New(ctx, p); err != nil {
		t.Fatalf("without a prediction, within the budget: %v", err)
	}
	// 40 + 301 completion tokens at $0.002/1k: $0.00068, over pinch's $0.0005 a day.
	p.Prediction.Content.OfString = openai.String(strings.Repeat("Lily had a ball. ", 300/17+1)[:300])
	_, err := pinch.Chat.Completions.New(ctx, p)
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 429 || ae.Code != "insufficient_quota" {
		t.Fatalf("a prediction whose worst case is over the budget: %v, want 429 insufficient_quota", err)
	}
}

// TestSpeculativeOptOut: "lmlite": {"speculative": false} decodes plainly — nothing
// drafted from the request's prediction (the model's counters do not move) — with
// the same answer; usage still has the (zero) prediction details.
func TestSpeculativeOptOut(t *testing.T) {
	es := startStoriesServer(t)
	ctx := context.Background()
	p := openai.ChatCompletionNewParams{Model: "stories", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Once upon a time")},
		MaxTokens: openai.Int(60), Temperature: openai.Float(0)}
	want, err := es.client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Prediction.Content.OfString = openai.String(want.Choices[0].Message.Content)
	before := es.block.Models()[0].DraftTokens
	got, err := es.client.Chat.Completions.New(ctx, p, option.WithJSONSet("lmlite", map[string]any{"speculative": false}))
	if err != nil {
		t.Fatal(err)
	}
	d := got.Usage.CompletionTokensDetails
	if got.Choices[0].Message.Content != want.Choices[0].Message.Content || es.block.Models()[0].DraftTokens != before ||
		!d.JSON.AcceptedPredictionTokens.Valid() || d.AcceptedPredictionTokens != 0 || d.RejectedPredictionTokens != 0 {
		t.Fatalf("opted out: %q (want %q), drafted %d, usage %s", got.Choices[0].Message.Content, want.Choices[0].Message.Content,
			es.block.Models()[0].DraftTokens-before, got.Usage.RawJSON())
	}
	if _, err := es.client.Chat.Completions.New(ctx, p); err != nil || es.block.Models()[0].DraftTokens == before {
		t.Fatalf("without the opt-out nothing was drafted (%v)", err)
	}
}
