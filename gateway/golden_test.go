package gateway

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/toolcall"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite gateway/testdata/golden from the answers")

// goldenEngine is a scriptedEngine whose tokens carry logprobs when asked (each
// piece its own token; before every third a token of no text, a character split
// across tokens), and that sends the prompt's tokens with theirs
// (Request.PromptLogprobs): fixed bytes for every feature of the answer's shape.
type goldenEngine struct{ *scriptedEngine }

func newGoldenEngine(script string) *fakeEngine {
	f := newFakeEngine()
	f.features = &goldenEngine{&scriptedEngine{fakeEngine: f, script: script, syntax: toolcall.Hermes}}
	return f
}

func goldenToken(id int32, text string, lp bool, top int) engine.Token {
	t := engine.Token{ID: id, Text: text}
	if lp {
		t.Piece, t.Logprob = text, -float32(id%7)/4
		for k := range top {
			t.TopLogprobs = append(t.TopLogprobs, engine.TopLogprob{ID: id + int32(k), Piece: text + strings.Repeat("'", k), Logprob: t.Logprob - float32(k)})
		}
	}
	return t
}

func (g *goldenEngine) Generate(ctx context.Context, model string, req engine.Request) (*engine.Stream, error) {
	if !fakeModels[model] {
		return nil, engine.ErrUnknownModel
	}
	st := engine.NewStream()
	go func() {
		u := engine.Usage{PromptTokens: len(req.Prompt), CachedTokens: 1, FinishReason: engine.FinishStop}
		if req.PromptLogprobs {
			for i, id := range req.Prompt {
				text := ""
				if id > 3 {
					text = string(rune(id - 3))
				}
				t := goldenToken(int32(i), text, true, req.TopLogprobs)
				t.Prompt = true
				st.Send(t)
			}
		}
		for i := 0; i < len(g.script) && i/4 < max(req.MaxTokens, 1); i += 4 {
			id := int32(u.CompletionTokens)
			if id%3 == 2 {
				st.Send(goldenToken(1000+id, "", req.Logprobs, req.TopLogprobs))
			}
			st.Send(goldenToken(id, g.script[i:min(i+4, len(g.script))], req.Logprobs, req.TopLogprobs))
			u.CompletionTokens++
		}
		if u.CompletionTokens >= req.MaxTokens && req.MaxTokens > 0 {
			u.FinishReason = engine.FinishLength
		}
		st.Finish(u, nil)
	}()
	return st, nil
}

func (g *goldenEngine) GenerateN(ctx context.Context, model string, req engine.Request, n int) ([]*engine.Stream, error) {
	var out []*engine.Stream
	for range n {
		st, err := g.Generate(ctx, model, req)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

var (
	goldenCreated = regexp.MustCompile(`"created":[0-9]+`)
	goldenTools   = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},{"type":"function","function":{"name":"get_time"}}]`
	goldenFuncs   = `"functions":[{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}},{"name":"get_time"}]`
)

// TestGoldenAnswerBytes: the bytes of chat and completions answers, whole and
// streamed, with tools (parallel and not, the legacy functions API), logprobs,
// echo, n choices and usage, are the ones recorded in testdata/golden (ids and
// times masked). A change to how answers are made must not change one byte
// (-update-golden rewrites them, for a change meant to).
func TestGoldenAnswerBytes(t *testing.T) {
	const script = "Let me look. \n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"
	const plain = "It is sunny, \"hot\" and é\n\n"
	cases := []struct {
		name, script, path, body string
	}{
		{"chat_tools_logprobs", script, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"weather?"}],` + goldenTools + `,"logprobs":true,"top_logprobs":2`},
		{"chat_tools_serial", script, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"weather?"}],` + goldenTools + `,"parallel_tool_calls":false,"logprobs":true`},
		{"chat_functions", script, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"weather?"}],` + goldenFuncs},
		{"chat_tools_text", plain, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"weather?"}],` + goldenTools + `,"logprobs":true,"top_logprobs":1`},
		{"chat_plain", plain, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":5`},
		{"completions_plain", plain, "/v1/completions", `{"model":"tiny","prompt":"Once"`},
		{"completions_echo_logprobs", plain, "/v1/completions", `{"model":"tiny","prompt":"Once","echo":true,"logprobs":2`},
		{"completions_echo", plain, "/v1/completions", `{"model":"tiny","prompt":"Once","echo":true`},
		{"completions_logprobs", plain, "/v1/completions", `{"model":"tiny","prompt":"Once","logprobs":1,"max_tokens":4`},
	}
	for _, c := range cases {
		ts := startServer(t, testConfig, newGoldenEngine(c.script))
		for _, way := range []struct{ name, tail string }{
			{"whole", `}`}, {"stream", `,"stream":true}`}, {"stream_usage", `,"stream":true,"stream_options":{"include_usage":true}}`}, {"n2", `,"n":2}`},
		} {
			name := c.name + "." + way.name
			resp, body := ts.post(c.path, ts.keys["acme"], c.body+way.tail)
			id := strings.TrimPrefix(resp.Header.Get("X-Request-Id"), "req_")
			got := resp.Status + "\n" + resp.Header.Get("Content-Type") + "\n" + goldenCreated.ReplaceAllString(strings.ReplaceAll(body, id, "ID"), `"created":0`)
			file := filepath.Join("testdata", "golden", name+".txt")
			if *updateGolden {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("%s: the answer's bytes changed:\n got: %s\nwant: %s", name, got, want)
			}
		}
	}
}
