package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

// ChatML is the template used for a model without a chat template:
// "<|im_start|>role\ncontent<|im_end|>\n" per message, then "<|im_start|>assistant\n"
// when a generation prompt is asked for.
const ChatML = "{% for message in messages %}" +
	"{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}" +
	"{% endfor %}" +
	"{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// Limits of a render. They bound what a hostile template can make the server do.
const (
	// MaxTemplateSize is the largest template source New accepts.
	MaxTemplateSize = 256 << 10
	// MaxNesting is the deepest nesting of brackets and blocks New accepts
	// (the parser and renderer recurse once per level).
	MaxNesting = 128
	// DefaultMaxOutput is Options.MaxOutput's default.
	DefaultMaxOutput = 16 << 20
	// DefaultMaxSteps is Options.MaxSteps's default.
	DefaultMaxSteps = 100_000
	// MaxRange is the most items range() yields (Jinja's sandbox uses the same).
	MaxRange = 100_000
	// MaxMacroDepth is the deepest macro recursion.
	MaxMacroDepth = 64
)

// Errors of the package, matched with errors.Is.
var (
	ErrTemplate  = errors.New("chat: bad template")          // New: the template does not parse or breaks a limit
	ErrRender    = errors.New("chat: render failed")         // Render: the template failed (raise_exception, type errors, panics)
	ErrTooLarge  = errors.New("chat: output too large")      // Render: output beyond Options.MaxOutput, or a value beyond the growth bounds
	ErrTooLong   = errors.New("chat: template ran too long") // Render: more than Options.MaxSteps steps, or macros nested too deep
	ErrException = errors.New("chat: template raised an exception")
	ErrVar       = errors.New("chat: reserved template variable") // RenderVars: a variable it may not set
)

// Message is one chat message as the template sees it (message.role,
// message.content, and for tool use message.tool_calls, message.tool_call_id,
// message.name and message.tools, present only when set).
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
	// Tools is the tools' JSON text on a system message, for templates that read
	// them there (Phi-4-mini's: message['tools'] between <|tool|> and <|/tool|>).
	Tools string `json:"tools,omitempty"`
}

// ToolCall is an assistant's call of a tool, as templates read it:
// {"id": ..., "type": "function", "function": {"name": ..., "arguments": ...}}.
// Arguments is JSON text (OpenAI's form); templates get it decoded (they write it
// with tojson), or as the string when it does not parse.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// decodeArgs decodes a tool call's arguments for a template (see JSONValue), or
// returns the text when it is not JSON.
func decodeArgs(s string) any {
	v, err := JSONValue(s)
	if err != nil {
		return s
	}
	return v
}

// OrderedDict builds a template dict whose keys keep the order fill adds them in.
func OrderedDict(fill func(add func(k string, v any))) any {
	d := &exec.Dict{}
	fill(func(k string, v any) {
		d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(k), Value: exec.AsValue(v)})
	})
	return d
}

// JSONValue decodes JSON text into template values as Python's json.loads would
// give them to jinja2: objects as ordered dicts (tojson keeps their key order),
// integers as int64, other numbers as float64. Use it for RenderVars' "tools".
func JSONValue(s string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	v, err := jsonValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("chat: data after the JSON value")
	}
	return v, nil
}

func jsonValue(dec *json.Decoder, depth int) (any, error) {
	if depth > 128 {
		return nil, fmt.Errorf("chat: JSON nested deeper than 128")
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch x := t.(type) {
	case json.Delim:
		if x == '{' {
			d := &exec.Dict{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := jsonValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(k), Value: exec.AsValue(v)})
			}
			_, err := dec.Token()
			return d, err
		}
		list := []any{}
		for dec.More() {
			v, err := jsonValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		_, err := dec.Token()
		return list, err
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, nil
		}
		f, _ := x.Float64()
		return f, nil
	}
	return t, nil
}

// Options configure a Template. The zero value works.
type Options struct {
	BOS, EOS string           // bos_token and eos_token; "" when the model has none
	Now      func() time.Time // the clock of strftime_now; nil: time.Now

	MaxOutput int // bytes of rendered text; 0: DefaultMaxOutput
	MaxSteps  int // loop iterations, statements and macro calls per render; 0: DefaultMaxSteps
}

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	source string
	tpl    *exec.Template
	opts   Options
}

// New compiles a chat template. An empty template means ChatML.
func New(template string, opts Options) (*Template, error) {
	if template == "" {
		template = ChatML
	}
	if len(template) > MaxTemplateSize {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrTemplate, len(template), MaxTemplateSize)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxOutput <= 0 {
		opts.MaxOutput = DefaultMaxOutput
	}
	if opts.MaxSteps <= 0 {
		opts.MaxSteps = DefaultMaxSteps
	}
	if err := checkTagChars(template); err != nil {
		return nil, err
	}
	src := rewriteLiterals(template)
	if err := checkNesting(src); err != nil {
		return nil, err
	}
	tpl, err := compile(src)
	if err != nil {
		return nil, err
	}
	return &Template{source: template, tpl: tpl, opts: opts}, nil
}

// Source returns the template's Jinja source.
func (t *Template) Source() string { return t.source }

// Render renders msgs. With addGenerationPrompt the text ends where the assistant's
// reply begins.
func (t *Template) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	return t.RenderVars(msgs, addGenerationPrompt, nil)
}

// RenderVars is Render with further template variables, such as "tools" (a list of
// JSON-like values: map[string]any, []any, string, float64, bool, nil) or
// "enable_thinking". It may not set messages, add_generation_prompt, bos_token,
// eos_token or the template globals. Go maps are written by tojson with sorted keys.
func (t *Template) RenderVars(msgs []Message, addGenerationPrompt bool, vars map[string]any) (out string, err error) {
	messages := make([]any, len(msgs))
	for i, m := range msgs {
		// An ordered dict, as in Python: tojson writes role before content.
		d := &exec.Dict{Pairs: []*exec.Pair{
			{Key: exec.AsValue("role"), Value: exec.AsValue(m.Role)},
			{Key: exec.AsValue("content"), Value: exec.AsValue(m.Content)},
		}}
		if len(m.ToolCalls) > 0 {
			calls := make([]any, len(m.ToolCalls))
			for k, c := range m.ToolCalls {
				calls[k] = &exec.Dict{Pairs: []*exec.Pair{
					{Key: exec.AsValue("id"), Value: exec.AsValue(c.ID)},
					{Key: exec.AsValue("type"), Value: exec.AsValue("function")},
					{Key: exec.AsValue("function"), Value: exec.AsValue(&exec.Dict{Pairs: []*exec.Pair{
						{Key: exec.AsValue("name"), Value: exec.AsValue(c.Name)},
						{Key: exec.AsValue("arguments"), Value: exec.AsValue(decodeArgs(c.Arguments))},
					}})},
				}}
			}
			d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue("tool_calls"), Value: exec.AsValue(calls)})
		}
		if m.ToolCallID != "" {
			d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue("tool_call_id"), Value: exec.AsValue(m.ToolCallID)})
		}
		if m.Name != "" {
			d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue("name"), Value: exec.AsValue(m.Name)})
		}
		if m.Tools != "" {
			d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue("tools"), Value: exec.AsValue(m.Tools)})
		}
		messages[i] = d
	}
	b := &budget{maxSteps: t.opts.MaxSteps, now: t.opts.Now}
	data := exec.NewContext(map[string]any{
		"messages":              messages,
		"add_generation_prompt": addGenerationPrompt,
		"bos_token":             t.opts.BOS,
		"eos_token":             t.opts.EOS,
		budgetKey:               b,
	})
	for k, v := range vars {
		if reservedVar(k) {
			return "", fmt.Errorf("%w: %q", ErrVar, k)
		}
		data.Set(k, v)
	}
	w := &limitWriter{max: t.opts.MaxOutput, b: b}
	defer func() {
		if p := recover(); p != nil {
			if f, ok := p.(fault); ok {
				b.fail(f.err)
				out, err = "", b.err
				return
			}
			out, err = "", fmt.Errorf("%w: panic: %v", ErrRender, p)
		}
	}()
	if err := t.tpl.Execute(w, data); err != nil {
		if b.err != nil {
			return "", b.err
		}
		return "", classify(err)
	}
	if b.err != nil {
		return "", b.err
	}
	return w.buf.String(), nil
}

// classify turns a render error into ErrRender. A limit or the template's
// exception never comes back as Execute's error: the budget records a limit (b.err),
// and raise carries the others out past gonja.
func classify(err error) error {
	return fmt.Errorf("%w: %s", ErrRender, cleanError(err))
}

// fault carries an error out of a render as a panic, which Render recovers: gonja
// keeps only the text of the errors that functions, filters, methods and tests
// return (gonja v2.9.1, the newest on the module proxy on 2026-11-28: exec/calls.go,
// filters.go and tests.go format them with %s, which ends the error chain), so an
// error returned as the call's value loses its kind. text/template's exec carries
// its errors out the same way. TestGonjaDropsTheErrorChain fails when gonja keeps
// the chain: then the errors can be returned as values again.
type fault struct{ err error }

// raise ends the render at once with err when err is a limit (ErrTooLarge,
// ErrTooLong) or the template's exception (ErrException), as Jinja's raise does;
// any other error it returns, to be the call's error value (ErrRender).
func raise(err error) error {
	if errors.Is(err, ErrException) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrTooLong) {
		panic(fault{err})
	}
	return err
}

// reservedVar reports whether RenderVars may not set name.
func reservedVar(name string) bool {
	switch name {
	case "messages", "add_generation_prompt", "bos_token", "eos_token", "loop", "self":
		return true
	}
	if strings.HasPrefix(name, "\x00") {
		return true
	}
	_, global := environment.Context.Get(name)
	return global
}

// cleanError shortens gonja's error chains, which repeat the template source.
func cleanError(err error) string {
	s := err.Error()
	if len(s) > 1000 {
		s = s[:1000] + "..."
	}
	return s
}

// limitWriter collects the output and fails past max bytes.
type limitWriter struct {
	buf bytes.Buffer
	max int
	b   *budget
}

func (w *limitWriter) Write(p []byte) (int, error) {
	if err := w.b.step(); err != nil {
		return 0, err
	}
	if w.buf.Len()+len(p) > w.max {
		w.b.fail(fmt.Errorf("%w: more than %d bytes", ErrTooLarge, w.max))
		return 0, w.b.err
	}
	return w.buf.Write(p)
}

func (w *limitWriter) WriteString(s string) (int, error) {
	if err := w.b.step(); err != nil {
		return 0, err
	}
	if w.buf.Len()+len(s) > w.max {
		w.b.fail(fmt.Errorf("%w: more than %d bytes", ErrTooLarge, w.max))
		return 0, w.b.err
	}
	return w.buf.WriteString(s)
}

// budgetKey names the per-render budget in the template's context. It is not an
// identifier, so a template cannot refer to it.
const budgetKey = "\x00budget"

// budget is the per-render account of steps and macro depth. One render runs on one
// goroutine, so it needs no lock.
type budget struct {
	steps, maxSteps int
	depth           int
	now             func() time.Time
	err             error // the first limit broken; it wins over gonja's wrapping
}

func (b *budget) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

func (b *budget) step() error {
	if b.err != nil {
		return b.err
	}
	b.steps++
	if b.steps > b.maxSteps {
		b.fail(fmt.Errorf("%w: more than %d steps", ErrTooLong, b.maxSteps))
	}
	return b.err
}

// budgetOf finds the render's budget in a context.
func budgetOf(ctx *exec.Context) *budget {
	if ctx == nil {
		return nil
	}
	v, ok := ctx.Get(budgetKey)
	if !ok {
		return nil
	}
	b, _ := v.(*budget)
	return b
}

// Loader: templates may not include, import or extend anything; the loader knows
// only the template itself.
const rootName = "/chat_template"

func newLoader(src string) (loaders.Loader, error) {
	return loaders.NewMemoryLoader(map[string]string{rootName: src})
}
