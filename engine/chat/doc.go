// Package chat renders a model's chat template: the Jinja program in the GGUF key
// tokenizer.chat_template that turns a conversation into the prompt text the model
// was trained on.
//
// # Use
//
//	tpl, err := chat.New(src, chat.Options{BOS: "<|begin_of_text|>", EOS: "<|eot_id|>"})
//	// once per model; tpl is safe for concurrent use
//	text, err := tpl.Render([]chat.Message{{Role: "user", Content: "Hi"}}, true)
//
// Render gives text; tokenizing it with special tokens parsed would turn texts that
// users typed into control tokens. The engine therefore quotes the messages first
// and encodes the result with tokenizer.Quoter (engine.Block.ChatTokens).
//
// An empty src means ChatML, the format used for models without a template. The
// caller converts its own message type to chat.Message: the engine imports this
// package, so this package must not import the engine.
//
// # As transformers renders it
//
// Templates are written for Hugging Face transformers, which renders them with
// Python's jinja2 in an ImmutableSandboxedEnvironment with trim_blocks and
// lstrip_blocks, the globals raise_exception and strftime_now, and a tojson filter
// that is json.dumps(ensure_ascii=False). Render gives the template messages (each
// an ordered dict of role and content, then tool_calls — each {"id", "type":
// "function", "function": {"name", "arguments"}} with the arguments decoded — and
// tool_call_id and name when set), add_generation_prompt, bos_token and
// eos_token; tools, documents and anything else stay undefined unless given to
// RenderVars (tools, as JSONValue or OrderedDict values, enable_thinking, ...).
// strftime_now reads
// Options.Now, so tests pass a fixed clock. The test suite holds the expected text
// of the Llama 3 and Qwen3 templates from ../shared and further cases produced by
// jinja2 itself (testdata/gen_golden.py).
//
// # Why gonja
//
// The templates are Jinja, with Python semantics underneath (str methods, negative
// indices, namespace(), slices like messages[::-1], loop variables, tests such as
// "is string"). Go's text/template would need every template translated by hand,
// as ollama does per model family. github.com/nikolalohinski/gonja/v2 is the
// maintained Go port of Jinja2: it parses the real syntax, has the loop object,
// namespace, slicing, the Python str methods and Jinja's filters and tests, and its
// environment is open: filters, globals, methods and statements are sets we build,
// so this package assembles its own environment without touching gonja's globals.
// Where gonja departs from Python in ways templates rely on, this package corrects
// it, without forking: after parsing, the syntax tree is rewritten so that x[i],
// a * b, a ** b, a + b and a ~ b call functions of this package (negative indices,
// integer powers, bounded growth; see rewrite.go), str.split and str.rsplit are
// replaced (gonja's maxsplit is off by one), and tojson writes Python's JSON. Dicts
// keep their insertion order through items(), keys(), values(), get() and the
// items filter (Mistral's template writes each tool key by key; dict.go), "is
// true" and "is false" hold for the booleans only, str.replace's count is optional,
// a backslash at the end of a line inside a string literal joins the lines, a
// conditional expression inside brackets ([1, (2 if c else 3)], f(x if c else y)),
// which gonja parses only at the top of {{ }} and {% set %}, is rewritten before
// parsing into an equivalent that evaluates only the branch taken (condexpr.go),
// and transformers' {% generation %} block renders its body.
// One difference stays: gonja has no None distinct from undefined, so {{ none }}
// prints "" where jinja2 prints "None" (templates test for none rather than print it).
//
// The features the families' templates with tools use (Llama 3.1/3.2, Qwen2.5/3,
// Mistral, Phi-4-mini) are checked against jinja2 one by one
// (testdata/gen_features_golden.py), and whole templates in those families' formats
// in package engine (testdata/families).
//
// # Hostile templates
//
// A template comes from a model file and is code; it must not be able to hang,
// crash or exhaust the server. Render recovers panics into errors and stops with
// ErrTooLong or ErrTooLarge when a render
//
//   - takes more than Options.MaxSteps steps (each loop iteration, each
//     skipped item of a filtered loop, each macro call, each write), or nests
//     macro calls deeper than MaxMacroDepth (Go cannot recover from a stack
//     overflow, so recursion must be stopped before it happens);
//   - writes more than Options.MaxOutput bytes;
//   - asks for a range of more than MaxRange items (jinja2's sandbox limit), or
//     builds a string or list beyond 4 MiB by repetition, concatenation, joining,
//     replacing, padding or indenting. Go cannot recover from running out of
//     memory either, so these are checked before the allocation.
//
// New refuses templates whose tags hold characters Jinja's syntax has no use for
// (non-ASCII outside string literals, a "!" without "="): gonja's lexer can loop
// forever or panic on some of those, found by fuzzing. It also refuses templates
// larger than MaxTemplateSize or nested deeper than
// MaxNesting (gonja's parser recurses per level), templates with recursive for
// loops (their depth cannot be bounded; chat templates recurse with macros), and
// templates that include, import or extend other templates: the loader knows only
// the template itself.
// Residual risk: a template can still build a large value by combinations the
// guards do not foresee (appending one big string to a list many times and
// printing the list); the steps bound keeps such loops short.
//
// Errors: ErrTemplate from New; from Render ErrException (raise_exception),
// ErrTooLong, ErrTooLarge, or ErrRender for anything else, all matched with
// errors.Is. gonja keeps only the text of an error a function, filter or method
// returns, so a limit or the exception ends the render at once (raise: a panic
// Render recovers, as text/template's exec does) and keeps its kind and message.
package chat
