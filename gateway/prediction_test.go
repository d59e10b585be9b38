package gateway

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/lmlite/lmlite/engine"
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
			got.Usage.CompletionTokens != plain.Usage.CompletionTokens {
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
	} {
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
				t.Errorf("%s, prediction %v: %v, want a 400 naming %s", endpoint, c.pred, err, c.param)
			}
		}
	}
}
