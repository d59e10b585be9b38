package gateway

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/responses"
)

// seededOutput is what one path (an API, streamed or not) gave for a request: its
// text, its prompt and output token counts, whether it ended at its token limit,
// and (chat only: the one wire of the three that exposes tokens) each token's
// bytes and logprob.
type seededOutput struct {
	path           string
	text           string
	prompt, output int64
	atLimit        bool
	tokens         []string // chat: each token's bytes and logprob ("%x %v")
}

// TestSameSeedSameTokensThroughChatResponsesMessages: on the real engine (the
// generated tiny llama, random weights), one conversation with one seed gives the
// same output through /v1/chat/completions, /v1/responses and /v1/messages, each
// streamed and not, greedy and sampled (temperature 0.8, top_p 0.95, two seeds), all
// through the official SDKs. Chat's logprobs (each token's bytes and logprob) are
// the same streamed and not; its tokens' bytes, joined, are byte for byte the text
// of the other four paths, and every path counts the same output tokens and prompt
// tokens and says alike whether it stopped at max_tokens. The comparison can fail:
// a different seed on one path (messages) gives a different text, and the two seeds
// give different texts.
func TestSameSeedSameTokensThroughChatResponsesMessages(t *testing.T) {
	es := startEngineServer(t)
	ctx := context.Background()
	ac := anthropicClient(es.base, es.key)
	const system, question, limit = "You are terse.", "Tell me about the sea.", 32

	chat := func(stream bool, temp float64, sd int) seededOutput {
		p := openai.ChatCompletionNewParams{Model: "tiny", MaxTokens: openai.Int(limit),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage(question)},
			Logprobs: openai.Bool(true)}
		opts := []option.RequestOption{option.WithJSONSet("temperature", temp), option.WithJSONSet("top_p", 0.95), option.WithJSONSet("seed", sd)}
		o := seededOutput{path: fmt.Sprintf("chat (stream %v)", stream)}
		var lps []openai.ChatCompletionTokenLogprob
		if stream {
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			st := es.client.Chat.Completions.NewStreaming(ctx, p, opts...)
			for st.Next() {
				ch := st.Current()
				if ch.JSON.Usage.Valid() && ch.Usage.CompletionTokens > 0 {
					o.prompt, o.output = ch.Usage.PromptTokens, ch.Usage.CompletionTokens
				}
				for _, c := range ch.Choices {
					o.text += c.Delta.Content
					lps = append(lps, c.Logprobs.Content...)
					if c.FinishReason != "" {
						o.atLimit = c.FinishReason == "length"
					}
				}
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
		} else {
			r, err := es.client.Chat.Completions.New(ctx, p, opts...)
			if err != nil {
				t.Fatal(err)
			}
			c := r.Choices[0]
			o.text, o.prompt, o.output, o.atLimit = c.Message.Content, r.Usage.PromptTokens, r.Usage.CompletionTokens, c.FinishReason == "length"
			lps = c.Logprobs.Content
		}
		var joined []byte
		for _, lp := range lps {
			var b []byte
			for _, x := range lp.Bytes {
				b = append(b, byte(x))
			}
			joined = append(joined, b...)
			o.tokens = append(o.tokens, fmt.Sprintf("%x %v", b, lp.Logprob))
		}
		if len(lps) != int(o.output) || !bytes.Equal(joined, []byte(o.text)) {
			t.Fatalf("%s: %d logprobs for %d output tokens; their bytes %q, the text %q", o.path, len(lps), o.output, joined, o.text)
		}
		return o
	}

	resp := func(stream bool, temp float64, sd int) seededOutput {
		p := responses.ResponseNewParams{Model: "tiny", Input: textInput(question), Instructions: openai.String(system),
			MaxOutputTokens: openai.Int(limit)}
		opts := []option.RequestOption{option.WithJSONSet("temperature", temp), option.WithJSONSet("top_p", 0.95), option.WithJSONSet("seed", sd)}
		o := seededOutput{path: fmt.Sprintf("responses (stream %v)", stream)}
		var r responses.Response
		if stream {
			var text string
			r, text, _ = streamResponse(t, es.client, p, opts...)
			if text != r.OutputText() {
				t.Fatalf("%s: deltas %q, response.completed %q", o.path, text, r.OutputText())
			}
		} else {
			rr, err := es.client.Responses.New(ctx, p, opts...)
			if err != nil {
				t.Fatal(err)
			}
			r = *rr
		}
		o.text, o.prompt, o.output = r.OutputText(), r.Usage.InputTokens, r.Usage.OutputTokens
		o.atLimit = r.Status == "incomplete" && r.IncompleteDetails.Reason == "max_output_tokens"
		return o
	}

	msgs := func(stream bool, temp float64, sd int) seededOutput {
		p := anthropic.MessageNewParams{Model: "tiny", MaxTokens: limit, System: []anthropic.TextBlockParam{{Text: system}}, Messages: userText(question)}
		opts := []aoption.RequestOption{aoption.WithJSONSet("temperature", temp), aoption.WithJSONSet("top_p", 0.95), seed(sd)}
		o := seededOutput{path: fmt.Sprintf("messages (stream %v)", stream)}
		var m anthropic.Message
		if stream {
			m, _ = streamMessage(t, ac, p, opts...)
		} else {
			r, err := ac.Messages.New(ctx, p, opts...)
			if err != nil {
				t.Fatal(err)
			}
			m = *r
		}
		o.text, o.prompt, o.output = textOf(&m), m.Usage.InputTokens+m.Usage.CacheReadInputTokens, m.Usage.OutputTokens
		o.atLimit = m.StopReason == anthropic.StopReasonMaxTokens
		return o
	}

	texts := map[string]string{}
	for _, tc := range []struct {
		name string
		temp float64
		seed int
	}{{"greedy", 0, 1}, {"sampled seed 7", 0.8, 7}, {"sampled seed 8", 0.8, 8}} {
		ref := chat(false, tc.temp, tc.seed)
		if ref.text == "" || ref.output == 0 || ref.prompt == 0 {
			t.Fatalf("%s: %+v", tc.name, ref)
		}
		sc := chat(true, tc.temp, tc.seed)
		if !slices.Equal(sc.tokens, ref.tokens) {
			t.Fatalf("%s: chat's tokens streamed %v, not streamed %v", tc.name, sc.tokens, ref.tokens)
		}
		for _, o := range []seededOutput{sc, resp(false, tc.temp, tc.seed), resp(true, tc.temp, tc.seed),
			msgs(false, tc.temp, tc.seed), msgs(true, tc.temp, tc.seed)} {
			if o.text != ref.text || o.output != ref.output || o.prompt != ref.prompt || o.atLimit != ref.atLimit {
				t.Fatalf("%s: %s gave %q (%d prompt, %d output tokens, at the limit %v); chat %q (%d, %d, %v)",
					tc.name, o.path, o.text, o.prompt, o.output, o.atLimit, ref.text, ref.prompt, ref.output, ref.atLimit)
			}
		}
		texts[tc.name] = ref.text
		if tc.temp > 0 {
			if other := msgs(false, tc.temp, tc.seed+100); other.text == ref.text {
				t.Fatalf("%s: seed %d through messages gave the same text as seed %d: %q", tc.name, tc.seed+100, tc.seed, ref.text)
			}
		}
	}
	if texts["sampled seed 7"] == texts["sampled seed 8"] || texts["sampled seed 7"] == texts["greedy"] {
		t.Fatalf("the seeds do not change the sampled text: %q", texts)
	}
}
