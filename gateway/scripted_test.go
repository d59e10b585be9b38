package gateway

import (
	"context"
	"testing"

	"github.com/openai/openai-go"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/grammar"
	"github.com/lmlite/lmlite/engine/toolcall"
)

// scriptedEngine is a fake at the Engine and Features interfaces whose every
// generation writes script, 4 bytes a token, then stops: for the gateway's handling
// of outputs a random-weight model does not write (several tool calls, text before
// them). It claims nothing about grammars: they are accepted and ignored.
type scriptedEngine struct {
	*fakeEngine
	script string
	syntax toolcall.Syntax // the model's tool-call syntax (ToolSyntax)
}

func newScriptedEngine(script string) *fakeEngine { return newScriptedSyntax(script, toolcall.Hermes) }

// newScriptedSyntax is newScriptedEngine for a model that writes tool calls in syn.
func newScriptedSyntax(script string, syn toolcall.Syntax) *fakeEngine {
	f := newFakeEngine()
	f.features = &scriptedEngine{fakeEngine: f, script: script, syntax: syn}
	return f
}

func (s *scriptedEngine) Generate(ctx context.Context, model string, req engine.Request) (*engine.Stream, error) {
	if !fakeModels[model] {
		return nil, engine.ErrUnknownModel
	}
	st := engine.NewStream()
	go func() {
		u := engine.Usage{PromptTokens: len(req.Prompt), FinishReason: engine.FinishStop}
		for i := 0; i < len(s.script) && ctx.Err() == nil; i += 4 {
			st.Send(engine.Token{ID: int32(u.CompletionTokens), Text: s.script[i:min(i+4, len(s.script))]})
			u.CompletionTokens++
		}
		if ctx.Err() != nil {
			u.FinishReason = engine.FinishCancelled
		}
		st.Finish(u, nil)
	}()
	return st, nil
}

func (s *scriptedEngine) GenerateN(ctx context.Context, model string, req engine.Request, n int) ([]*engine.Stream, error) {
	var out []*engine.Stream
	for range n {
		st, err := s.Generate(ctx, model, req)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

func (s *scriptedEngine) CompileSchema([]byte) (*grammar.Grammar, error) {
	return grammar.JSONObject(), nil
}
func (s *scriptedEngine) ChatTokensTools(model string, msgs []engine.Message, _ []engine.Tool) ([]int32, error) {
	return s.ChatTokens(model, msgs)
}
func (s *scriptedEngine) ToolSyntax(string) (toolcall.Syntax, error) { return s.syntax, nil }
func (s *scriptedEngine) ToolGrammar(string, []engine.Tool) (*grammar.Grammar, error) {
	return grammar.JSONObject(), nil
}
func (s *scriptedEngine) Embed(context.Context, string, engine.EmbedRequest) (engine.Embeddings, error) {
	return engine.Embeddings{}, engine.ErrNoEmbeddings
}

const twoCalls = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"

// TestParallelToolCalls: an output with text and two calls gives the content and
// both calls (distinct ids, finish "tool_calls"), streamed as delta.tool_calls of
// index 0 then 1, each opening with its id and name; parallel_tool_calls false keeps
// the first call; tool_choice none leaves the text as it is.
func TestParallelToolCalls(t *testing.T) {
	ts := startServer(t, testConfig, newScriptedEngine(twoCalls))
	c := ts.client("acme")
	ctx := context.Background()
	params := func(parallel bool, choice string) openai.ChatCompletionNewParams {
		p := openai.ChatCompletionNewParams{Model: "tiny", Messages: user("weather and time?"), Tools: weatherTools(),
			ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String(choice)}}
		if !parallel {
			p.ParallelToolCalls = openai.Bool(false)
		}
		return p
	}
	want := []struct{ name, args string }{{"get_weather", `{"city": "Paris", "unit": "c"}`}, {"get_time", `{}`}}
	check := func(what string, m openai.ChatCompletionMessage, finish string, n int) {
		t.Helper()
		if finish != "tool_calls" || len(m.ToolCalls) != n || m.Content != "Let me look." {
			t.Fatalf("%s: finish %q, content %q, %d calls: %+v", what, finish, m.Content, len(m.ToolCalls), m.ToolCalls)
		}
		ids := map[string]bool{}
		for k, tc := range m.ToolCalls {
			if tc.Function.Name != want[k].name || tc.Function.Arguments != want[k].args || tc.ID == "" || ids[tc.ID] {
				t.Fatalf("%s: call %d %+v", what, k, tc)
			}
			ids[tc.ID] = true
		}
	}
	for _, parallel := range []bool{true, false} {
		n := map[bool]int{true: 2, false: 1}[parallel]
		resp, err := c.Chat.Completions.New(ctx, params(parallel, "auto"))
		if err != nil {
			t.Fatal(err)
		}
		check("not streamed", resp.Choices[0].Message, string(resp.Choices[0].FinishReason), n)
		acc, chunks := collect(t, c, params(parallel, "auto"))
		check("streamed", acc.Choices[0].Message, string(acc.Choices[0].FinishReason), n)
		next := int64(0)
		for _, ch := range chunks {
			for _, d := range ch.Choices {
				for _, tc := range d.Delta.ToolCalls {
					switch {
					case tc.Index == next && tc.ID != "" && tc.Function.Name == want[next].name:
						next++ // a call opens with its id and name, in order
					case tc.Index == next-1 && tc.ID == "" && tc.Function.Name == "":
					default:
						t.Fatalf("delta %+v after %d calls opened", tc, next)
					}
				}
			}
		}
		if next != int64(n) {
			t.Fatalf("%d calls opened in the stream, want %d", next, n)
		}
	}
	resp, err := c.Chat.Completions.New(ctx, params(true, "none"))
	if err != nil {
		t.Fatal(err)
	}
	if m := resp.Choices[0].Message; m.Content != twoCalls || len(m.ToolCalls) != 0 || resp.Choices[0].FinishReason != "stop" {
		t.Fatalf("tool_choice none: %+v", resp.Choices[0])
	}
}

// TestToolCallFamilies: the calls of each family's syntax, as the model's text
// decodes (control-token markers such as <|python_tag|>, [TOOL_CALLS] and
// <|tool_call|> decode to nothing), come back as the same OpenAI tool_calls,
// streamed and not, after the text before them.
func TestToolCallFamilies(t *testing.T) {
	const args = `{"city": "Paris", "unit": "c"}`
	cases := []struct {
		syn    toolcall.Syntax
		script string
	}{
		{toolcall.Hermes, "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + args + "}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"},
		// Llama 3.1's JSON tool calling: <|python_tag|> (a control token) or none, calls separated by ";".
		{toolcall.Llama3, `{"name": "get_weather", "parameters": ` + args + `}; {"name": "get_time", "parameters": {}}`},
		{toolcall.Mistral, `[{"name": "get_weather", "arguments": ` + args + `}, {"name": "get_time", "arguments": {}}]`},
		{toolcall.Phi4, `[{"name": "get_weather", "arguments": ` + args + `}, {"name": "get_time", "arguments": {}}]`},
	}
	for _, c := range cases {
		t.Run(c.syn.String(), func(t *testing.T) {
			ts := startServer(t, testConfig, newScriptedSyntax(c.script, c.syn))
			cl := ts.client("acme")
			p := openai.ChatCompletionNewParams{Model: "tiny", Messages: user("weather and time?"), Tools: weatherTools()}
			content := ""
			if c.syn == toolcall.Hermes {
				content = "Let me look."
			}
			for what, ch := range bothWays(t, cl, p) {
				m := ch.Message
				if ch.FinishReason != "tool_calls" || m.Content != content || len(m.ToolCalls) != 2 ||
					m.ToolCalls[0].Function.Name != "get_weather" || m.ToolCalls[0].Function.Arguments != args ||
					m.ToolCalls[1].Function.Name != "get_time" || m.ToolCalls[1].Function.Arguments != "{}" {
					t.Errorf("%s: finish %q, content %q, calls %+v", what, ch.FinishReason, m.Content, m.ToolCalls)
				}
			}
		})
	}
}

// TestToolsPlainAnswer: with tools offered (auto), an answer without calls is its
// text exactly, trailing white space too, streamed and not.
func TestToolsPlainAnswer(t *testing.T) {
	const text = "It is sunny in Paris. \n\n"
	ts := startServer(t, testConfig, newScriptedEngine(text))
	c := ts.client("acme")
	p := openai.ChatCompletionNewParams{Model: "tiny", Messages: user("weather?"), Tools: weatherTools()}
	for what, ch := range bothWays(t, c, p) {
		if ch.Message.Content != text || len(ch.Message.ToolCalls) != 0 || ch.FinishReason != "stop" {
			t.Errorf("%s: %q, %d calls, finish %q", what, ch.Message.Content, len(ch.Message.ToolCalls), ch.FinishReason)
		}
	}
}

// bothWays asks p streamed and not and returns the first choice of each.
func bothWays(t *testing.T, c openai.Client, p openai.ChatCompletionNewParams) map[string]openai.ChatCompletionChoice {
	t.Helper()
	resp, err := c.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	acc, _ := collect(t, c, p)
	return map[string]openai.ChatCompletionChoice{"not streamed": resp.Choices[0], "streamed": acc.Choices[0]}
}
