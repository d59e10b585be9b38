package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/toolcall"
	"github.com/lmlite/lmlite/internal/testenv"
)

// toolFamily is a generated model whose GGUF holds a chat template written in one
// family's format (engine/testdata/families), with what its prompt must show.
type toolFamily struct {
	id, arch, vocab, template string
	syntax                    toolcall.Syntax
	// offer: the tools in the family's format; call and result: the earlier call
	// and the tool's result as the template renders them (%s: the call's id as
	// the template gets it).
	offer, call, result string
	// src: the template's text when it is not one of engine/testdata/families
	// (a real model's, from testenv.ChatTemplate).
	src string
	// refuse: a conversation the template refuses (raise_exception): "two calls"
	// in one turn (Llama's), roles that do not "alternate" (Mistral's).
	refuse string
}

var toolFamilies = []toolFamily{
	{id: "llama3", arch: "llama", vocab: "testdata/tokenizer/ggml-vocab-llama-bpe.gguf", template: "llama3", syntax: toolcall.Llama3,
		offer:  "Environment: ipython\n",
		call:   `<|start_header_id|>assistant<|end_header_id|>` + "\n\n" + `{"name": "get_weather", "parameters": {`,
		result: `<|start_header_id|>ipython<|end_header_id|>` + "\n\n" + `"{\"temperature\": 21}"<|eot_id|>`, refuse: "two calls"},
	{id: "qwen", arch: "qwen2", vocab: "testdata/tokenizer/ggml-vocab-qwen2.gguf", template: "qwen", syntax: toolcall.Hermes,
		offer:  "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"The weather in a city\", \"parameters\": {",
		call:   "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {",
		result: "<|im_start|>user\n<tool_response>\n{\"temperature\": 21}\n</tool_response><|im_end|>"},
	{id: "mistral", arch: "llama", template: "mistral", syntax: toolcall.Mistral,
		offer:  `[AVAILABLE_TOOLS][{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city", "parameters": {`,
		call:   `[TOOL_CALLS][{"name": "get_weather", "arguments": {`,
		result: `[TOOL_RESULTS]{"content": {"temperature": 21}, "call_id": "%s"}[/TOOL_RESULTS]`, refuse: "alternation"},
	{id: "phi4", arch: "phi3", vocab: "testdata/tokenizer/ggml-vocab-phi-3.gguf", template: "phi4", syntax: toolcall.Phi4,
		offer:  `<|tool|>{"name": "get_weather", "description": "The weather in a city", "parameters": {`,
		call:   `<|tool_call|>[{"name": "get_weather", "arguments": {`,
		result: `<|tool_response|>"{\"temperature\": 21}"<|end|>`},
}

// realToolFamilies are generated models (random weights) whose GGUF holds a real
// model's chat template, read from the registry packages scripts/chattemplates
// installs: Llama 3.1's and Ministral 3's (Mistral's [AVAILABLE_TOOLS] and
// [TOOL_CALLS]name[ARGS] format).
func realToolFamilies(t *testing.T) []toolFamily {
	return []toolFamily{
		{id: "llama3.1-real", arch: "llama", vocab: "testdata/tokenizer/ggml-vocab-llama-bpe.gguf", src: testenv.ChatTemplate(t, "llama3.1"), syntax: toolcall.Llama3,
			offer:  "Environment: ipython\n",
			call:   `<|start_header_id|>assistant<|end_header_id|>` + "\n\n" + `{"name": "get_weather", "parameters": {`,
			result: `<|start_header_id|>ipython<|end_header_id|>` + "\n\n" + `"{\"temperature\": 21}"<|eot_id|>`, refuse: "two calls"},
		{id: "ministral3-real", arch: "llama", src: testenv.ChatTemplate(t, "ministral3"), syntax: toolcall.Mistral,
			offer:  `[AVAILABLE_TOOLS][{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city", "parameters": {`,
			call:   `[TOOL_CALLS]get_weather[ARGS]{`,
			result: `[TOOL_RESULTS]{"temperature": 21}[/TOOL_RESULTS]`, refuse: "alternation"},
	}
}

// startFamilyServer serves one generated tiny model per family, each with its
// family's chat template in tokenizer.chat_template.
func startFamilyServer(t *testing.T, families []toolFamily) *engineServer {
	t.Helper()
	dir := t.TempDir()
	var models strings.Builder
	// The models are generated two at a time (each is CPU work on one core: a whole
	// vocabulary's embeddings under the race detector); the config lists them in order.
	opts := make([]genmodel.Options, len(families))
	for i, f := range families {
		src := []byte(f.src)
		if f.src == "" {
			var err error
			if src, err = os.ReadFile(filepath.Join("..", "engine", "testdata", "families", f.template+".jinja")); err != nil {
				t.Fatal(err)
			}
		}
		opts[i] = genmodel.Options{Arch: f.arch, Preset: "tiny", Type: "q8_0", Seed: 5, ChatTemplate: string(src)}
		if f.vocab != "" {
			opts[i].Vocab = testenv.SharedFile(t, f.vocab)
		}
	}
	errs := make([]error, len(families))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for i, f := range families {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = genmodel.Generate(opts[i], filepath.Join(dir, f.id+".gguf"))
		})
	}
	wg.Wait()
	for i, f := range families {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		fmt.Fprintf(&models, "  - {id: %s, path: %s, max_model_len: 2048, max_concurrency: 4}\n", f.id, filepath.Join(dir, f.id+".gguf"))
	}
	return startEngine(t, `
ledger: {sync: process}
models:
`+models.String()+`
plans:
  open: {requests_per_second: 1000, burst: 1000, max_concurrency: 100}
tenants:
  - {id: acme, plan: open}
`, engine.Config{})
}

// promptOf renders and tokenizes msgs and tools as the gateway does for model id,
// and decodes the tokens back (control tokens as their text).
func promptOf(t *testing.T, es *engineServer, id string, msgs []engine.Message, tools []engine.Tool) (string, int) {
	t.Helper()
	ids, err := es.block.ChatTokensTools(id, msgs, tools)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := es.block.Tokenizer(id)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, x := range ids {
		if p := tok.Piece(x); p != "" {
			sb.WriteString(p)
		} else {
			sb.WriteString(tok.TokenText(x))
		}
	}
	return sb.String(), len(ids)
}

// TestSDKToolFamilies: through the gateway with the official SDK, for a model of
// each family (Llama 3.1+, Qwen2.5 Hermes style, Mistral, Phi-4-mini; a generated
// model whose GGUF holds a chat template in that family's format): the tools reach
// the prompt in the family's format (the prompt the gateway ran is the one the
// engine renders with the tools: same token count, and it shows them); the output,
// in the family's syntax (required constrains a call; Llama writes {"name",
// "parameters"}, Mistral and Phi a JSON array), comes back as message.tool_calls,
// and streamed as delta.tool_calls with the head first; sending the call and the
// tool's result back renders them as the family's template does (Mistral's with
// the call id made 9 letters and digits, which its template requires), and the
// model answers in text.
func TestSDKToolFamilies(t *testing.T) {
	testToolFamilies(t, toolFamilies)
}

// TestSDKRealTemplateTools is TestSDKToolFamilies for generated models (random
// weights) whose GGUF holds a real model's chat template (Llama 3.1's; Ministral
// 3's, Mistral's current [AVAILABLE_TOOLS] format), read at test time from the
// registry packages scripts/chattemplates installs: with the official SDK, tools
// and tool_choice named (a grammar-constrained call) come back as tool_calls,
// streamed as delta.tool_calls too; the tools, the call and the role "tool" result
// reach the prompt as the real template renders them; a conversation the template
// refuses is a 400.
func TestSDKRealTemplateTools(t *testing.T) {
	testToolFamilies(t, realToolFamilies(t))
}

func testToolFamilies(t *testing.T, families []toolFamily) {
	es := startFamilyServer(t, families)
	ctx := context.Background()
	var weather map[string]any
	json.Unmarshal([]byte(weatherParams), &weather)
	engineTools := []engine.Tool{
		{Name: "get_weather", Description: "The weather in a city", Parameters: mustJSON(t, weather)},
		{Name: "get_time", Description: "The time now"},
	}
	v := compileSchema(t, weatherParams)
	for _, f := range families {
		t.Run(f.id, func(t *testing.T) {
			if syn, err := es.block.ToolSyntax(f.id); err != nil || syn != f.syntax {
				t.Fatalf("syntax %v, %v; want %v", syn, err, f.syntax)
			}
			p := toolParams(7, named)
			p.Model = f.id
			resp, err := es.client.Chat.Completions.New(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			c := resp.Choices[0]
			if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.Content != "" {
				t.Fatalf("finish %q, message %+v", c.FinishReason, c.Message)
			}
			call := c.Message.ToolCalls[0]
			if call.Function.Name != "get_weather" || call.ID == "" {
				t.Fatalf("call %+v", call)
			}
			validate(t, v, call.Function.Arguments)

			user := []engine.Message{{Role: "user", Content: "What is the weather in Paris?"}}
			prompt, n := promptOf(t, es, f.id, user, engineTools)
			if int64(n) != resp.Usage.PromptTokens {
				t.Errorf("the gateway's prompt has %d tokens, the engine renders %d:\n%s", resp.Usage.PromptTokens, n, prompt)
			}
			if !strings.Contains(prompt, f.offer) || !strings.Contains(prompt, "get_time") {
				t.Errorf("the tools are not in the prompt as %q:\n%s", f.offer, prompt)
			}

			streamed, chunks := collect(t, es.client, p)
			sc := streamed.Choices[0]
			if sc.FinishReason != "tool_calls" || len(sc.Message.ToolCalls) != 1 || sc.Message.ToolCalls[0].Function.Arguments != call.Function.Arguments {
				t.Fatalf("streamed %+v, not streamed %+v", sc.Message.ToolCalls, c.Message.ToolCalls)
			}
			heads, frags := 0, 0
			for _, ch := range chunks {
				for _, d := range ch.Choices {
					for _, tcd := range d.Delta.ToolCalls {
						switch {
						case tcd.ID != "" && tcd.Function.Name == "get_weather" && tcd.Index == 0:
							if frags > 0 {
								t.Fatalf("a head after argument fragments: %+v", tcd)
							}
							heads++
						case tcd.ID == "" && tcd.Function.Name == "" && tcd.Index == 0:
							frags++
						default:
							t.Fatalf("tool-call delta %+v", tcd)
						}
					}
				}
			}
			if heads != 1 || frags < 2 {
				t.Fatalf("%d heads, %d argument fragments", heads, frags)
			}

			// The call and its result go back; the model answers in text.
			msgs := append(p.Messages, c.Message.ToParam(), openai.ToolMessage(`{"temperature": 21}`, call.ID))
			next := openai.ChatCompletionNewParams{Model: f.id, Messages: msgs, Tools: weatherTools(),
				ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")},
				MaxTokens:  openai.Int(8), Seed: openai.Int(7)}
			answer, err := es.client.Chat.Completions.New(ctx, next)
			if err != nil {
				t.Fatal(err)
			}
			if a := answer.Choices[0]; len(a.Message.ToolCalls) != 0 || a.Message.Content == "" {
				t.Fatalf("answer after the result: %+v", a)
			}
			history := append(user,
				engine.Message{Role: "assistant", ToolCalls: []engine.ToolCall{{ID: call.ID, Name: call.Function.Name, Arguments: call.Function.Arguments}}},
				engine.Message{Role: "tool", ToolCallID: call.ID, Content: `{"temperature": 21}`})
			prompt, n = promptOf(t, es, f.id, history, engineTools)
			if int64(n) != answer.Usage.PromptTokens {
				t.Errorf("the gateway's prompt has %d tokens, the engine renders %d:\n%s", answer.Usage.PromptTokens, n, prompt)
			}
			result := f.result
			if strings.Contains(result, "%s") {
				result = fmt.Sprintf(result, engine.MistralToolCallID(call.ID))
			}
			if !strings.Contains(prompt, f.call) || !strings.Contains(prompt, result) {
				t.Errorf("the call (%q) or the result (%q) is not in the prompt:\n%s", f.call, result, prompt)
			}

			// A conversation the template refuses (raise_exception) is the client's
			// error: two calls in one turn for Llama, roles that do not alternate for
			// Mistral.
			var bad []openai.ChatCompletionMessageParamUnion
			switch f.refuse {
			case "two calls":
				two := c.Message.ToParam()
				two.OfAssistant.ToolCalls = append(two.OfAssistant.ToolCalls, two.OfAssistant.ToolCalls[0])
				two.OfAssistant.ToolCalls[1].ID = "call_2"
				bad = append(p.Messages, two, openai.ToolMessage("1", call.ID), openai.ToolMessage("2", "call_2"))
			case "alternation":
				bad = append(p.Messages, openai.UserMessage("And Rome?"))
			default:
				return
			}
			next.Messages = bad
			_, err = es.client.Chat.Completions.New(ctx, next)
			var ae *openai.Error
			if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Param != "messages" || !strings.Contains(ae.Message, "template") {
				t.Fatalf("a conversation the template refuses: %v", err)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
