// Package toolcall turns a model's tool-call syntax into OpenAI tool calls, as the
// text streams: plain text passes through as content, and each call comes out as
// its name, then fragments of its arguments' JSON, as OpenAI streams
// delta.tool_calls.
//
// The syntaxes, chosen from the chat template (Detect):
//
//	Hermes (Qwen2.5, Qwen3, Hermes):  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>   (repeated)
//	Llama 3.1+:                       <|python_tag|>{"name": "f", "parameters": {...}}                 (";"-separated)
//	Mistral:                          [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]  or  [TOOL_CALLS]f[ARGS]{...}
//	Phi-4:                            <|tool_call|>[{"name": "f", "arguments": {...}}]<|/tool_call|>
//	                                  or, at the start (vLLM's Phi-4-mini template), functools[{...}, ...]
//
// Markers that are control tokens (<|python_tag|>, [TOOL_CALLS], <|tool_call|>) give
// no text when decoded, so for those syntaxes an output that starts with '{' or '['
// is a tool call too.
//
// A Parser is pure (no I/O, no clock): Feed it the output's text piece by piece, then
// Finish. The package never panics on any input (fuzzed).
package toolcall

import (
	"errors"
	"fmt"
	"strings"
)

// Syntax is a family of tool-call markup.
type Syntax int

const (
	Hermes Syntax = iota
	Llama3
	Mistral
	Phi4
)

func (s Syntax) String() string {
	switch s {
	case Hermes:
		return "hermes"
	case Llama3:
		return "llama3"
	case Mistral:
		return "mistral"
	case Phi4:
		return "phi4"
	}
	return fmt.Sprintf("syntax(%d)", int(s))
}

// Detect picks the syntax a chat template's model writes, from the template's own
// markup; Hermes when the template names none (the format lmlite's fallback tool
// prompt asks for).
func Detect(template string) Syntax {
	syn, _ := DetectTemplate(template)
	return syn
}

// DetectTemplate is Detect, and whether the template named a syntax at all.
func DetectTemplate(template string) (Syntax, bool) {
	switch {
	case strings.Contains(template, "[TOOL_CALLS]"):
		return Mistral, true
	case strings.Contains(template, "<|tool_call|>") || strings.Contains(template, "<|tool|>") || strings.Contains(template, "functools["):
		return Phi4, true
	case strings.Contains(template, "<tool_call>"):
		return Hermes, true
	case strings.Contains(template, "<|python_tag|>") || strings.Contains(template, "ipython"):
		return Llama3, true
	}
	return Hermes, false
}

// DetectVocab picks the syntax from the markers a vocabulary has as tokens (has
// reports whether a token's text is in it), for a template that names none: each
// family's marker is a token of its own vocabulary only. ok is false when none is.
func DetectVocab(has func(token string) bool) (syn Syntax, ok bool) {
	for _, c := range []struct {
		marker string
		syn    Syntax
	}{{"[TOOL_CALLS]", Mistral}, {"<|tool_call|>", Phi4}, {"<|python_tag|>", Llama3}, {"<tool_call>", Hermes}} {
		if has(c.marker) {
			return c.syn, true
		}
	}
	return Hermes, false
}

// ErrMalformed: the output began a tool call that does not parse.
var ErrMalformed = errors.New("toolcall: malformed tool call")

// Event is one step of the parsed stream: content text, or a part of tool call
// Index (its Name on its first event, then argument fragments).
type Event struct {
	Content   string
	Index     int
	Name      string // the first event of a call
	Arguments string // a fragment of the call's arguments JSON
	Call      bool   // a tool-call event (else content)
}

// Call is one complete tool call.
type Call struct {
	Name      string
	Arguments string // JSON text
}

// markers of each syntax: start and end of a call block ("" when none).
func (s Syntax) markers() (start, end string) {
	switch s {
	case Hermes:
		return "<tool_call>", "</tool_call>"
	case Llama3:
		return "<|python_tag|>", ""
	case Mistral:
		return "[TOOL_CALLS]", ""
	case Phi4:
		return "<|tool_call|>", "<|/tool_call|>"
	}
	return "<tool_call>", "</tool_call>"
}

// Parser parses one output. The zero value is not usable: use New.
type Parser struct {
	syn        Syntax
	start, end string

	mode    mode
	hold    string // text held back: it might be the start of a marker
	started bool   // some non-space content or a call was seen
	n       int    // calls begun
	err     error

	// The call being parsed.
	sc        scanner
	inArray   bool // calls in a JSON array
	afterArr  bool // the array closed
	name      string
	nameDone  bool
	pending   strings.Builder // argument bytes held until the name is known
	argsKey   bool            // the current value is the arguments
	argStr    bool            // the arguments are a JSON string (decoded at the end)
	argBuf    strings.Builder
	emitted   bool // the current call's name event went out
	mistral   strings.Builder
	nameKey   bool // the current value is the name
	afterCall bool // a call ended and no content followed yet
	// mistralArgs: the arguments value is scanned alone (Mistral's name[ARGS]{...}).
	mistralArgs bool
}

type mode int

const (
	mText     mode = iota // plain content
	mBetween              // inside a call block, between calls (white space, ',', ';', ']')
	mCall                 // inside a call object
	mEnd                  // expecting the end marker
	mMistName             // Mistral v11: the name before [ARGS]
)

// New returns a parser for syn.
func New(syn Syntax) *Parser {
	p := &Parser{syn: syn}
	p.start, p.end = syn.markers()
	return p
}

// Feed parses the next piece of the output and returns its events.
func (p *Parser) Feed(text string) []Event {
	var ev []Event
	if p.err != nil {
		return nil
	}
	s := p.hold + text
	p.hold = ""
	for len(s) > 0 && p.err == nil {
		switch p.mode {
		case mText:
			s, ev = p.text(s, ev)
		case mBetween:
			s, ev = p.between(s, ev)
		case mCall:
			s, ev = p.call(s, ev)
		case mEnd:
			s, ev = p.endMarker(s, ev)
		case mMistName:
			s, ev = p.mistralName(s, ev)
		}
	}
	return ev
}

// Finish ends the output: it returns the events of text held back, and
// ErrMalformed if a call was left open or did not parse.
func (p *Parser) Finish() ([]Event, error) {
	var ev []Event
	if p.err != nil {
		return nil, p.err
	}
	switch p.mode {
	case mText:
		if p.hold != "" && !(p.afterCall && strings.TrimSpace(p.hold) == "") {
			ev = append(ev, Event{Content: p.hold})
			p.hold = ""
		}
	case mBetween:
		if p.inArray && !p.afterArr {
			return ev, fmt.Errorf("%w: the array of calls is not closed", ErrMalformed)
		}
	case mEnd:
		// A missing end marker at the very end is forgiven (generation stopped at it).
	default:
		return ev, fmt.Errorf("%w: the output ends inside a call", ErrMalformed)
	}
	return ev, nil
}

// text passes content through until a marker (or, for the marker-less syntaxes, an
// output starting with '{' or '[').
func (p *Parser) text(s string, ev []Event) (string, []Event) {
	if !p.started || p.afterCall {
		// White space at the start, or after a call, is held: it is content only if
		// more text follows.
		trimmed := strings.TrimLeft(s, " \t\r\n")
		if trimmed == "" {
			p.hold = s
			return "", ev
		}
		if p.afterCall {
			s, p.afterCall = trimmed, false
		}
		if !p.started && p.syn == Phi4 {
			// vLLM's Phi-4-mini template asks for functools[...] at the start.
			const functools = "functools"
			switch {
			case strings.HasPrefix(trimmed, functools):
				p.started, p.mode = true, mBetween
				return trimmed[len(functools):], ev
			case strings.HasPrefix(functools, trimmed):
				p.hold = s
				return "", ev
			}
		}
		isMarker := strings.HasPrefix(trimmed, p.start) || strings.HasPrefix(p.start, trimmed)
		if !p.started && !isMarker && p.syn != Hermes && (trimmed[0] == '{' || trimmed[0] == '[') {
			p.started = true
			p.mode = mBetween
			return trimmed, ev
		}
	}
	i := strings.Index(s, p.start)
	if i >= 0 {
		if i > 0 {
			ev = appendContent(ev, s[:i])
			p.started = true
		}
		p.started = true
		p.mode = mBetween
		if p.syn == Mistral {
			p.mode = mBetween
		}
		return s[i+len(p.start):], ev
	}
	// Hold back a suffix that may begin the marker.
	keep := 0
	for k := min(len(s), len(p.start)-1); k > 0; k-- {
		if strings.HasPrefix(p.start, s[len(s)-k:]) {
			keep = k
			break
		}
	}
	out := s[:len(s)-keep]
	if strings.TrimSpace(out) != "" {
		p.started = true
	}
	ev = appendContent(ev, out)
	p.hold = s[len(s)-keep:]
	return "", ev
}

func appendContent(ev []Event, s string) []Event {
	if s == "" {
		return ev
	}
	if k := len(ev); k > 0 && !ev[k-1].Call {
		ev[k-1].Content += s
		return ev
	}
	return append(ev, Event{Content: s})
}

// between skips what separates calls and starts the next one.
func (p *Parser) between(s string, ev []Event) (string, []Event) {
	for len(s) > 0 {
		c := s[0]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			s = s[1:]
		case c == '[' && !p.inArray && p.n == 0:
			p.inArray = true
			s = s[1:]
		case c == ',' && p.inArray && !p.afterArr && p.n > 0:
			s = s[1:]
		case c == ';' && p.syn == Llama3 && p.n > 0:
			s = s[1:]
		case c == ']' && p.inArray && !p.afterArr:
			p.afterArr = true
			s = s[1:]
			if p.end != "" {
				p.mode = mEnd
				return s, ev
			}
		case c == '{' && (!p.inArray || !p.afterArr):
			p.beginCall()
			return s, ev
		case p.syn == Mistral && p.n == 0 && !p.inArray && isNameByte(c):
			p.mode = mMistName
			return s, ev
		case p.end != "" && strings.HasPrefix(p.end, s[:min(len(s), len(p.end))]):
			p.mode = mEnd
			return s, ev
		case p.syn == Hermes && p.n > 0 && !p.inArray:
			// After a call and its end marker: back to content (another <tool_call> may follow).
			p.mode, p.afterCall = mText, true
			return s, ev
		default:
			p.err = fmt.Errorf("%w: unexpected %q", ErrMalformed, c)
			return "", ev
		}
	}
	return "", ev
}

func isNameByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// mistralName reads Mistral v11's "name[ARGS]" before the arguments object.
func (p *Parser) mistralName(s string, ev []Event) (string, []Event) {
	const args = "[ARGS]"
	p.mistral.WriteString(s)
	all := p.mistral.String()
	i := strings.Index(all, args)
	if i < 0 {
		if len(all) > 256 {
			p.err = fmt.Errorf("%w: no [ARGS] after the name", ErrMalformed)
		}
		return "", ev
	}
	name := strings.TrimSpace(all[:i])
	p.mistral.Reset()
	p.beginCall()
	p.name, p.nameDone = name, true
	ev = p.emitName(ev)
	// The arguments object follows: scan it as the value of "arguments".
	p.sc = scanner{depth: 1, state: sValue}
	p.argsKey, p.mistralArgs = true, true
	return all[i+len(args):], ev
}

func (p *Parser) beginCall() {
	p.mode = mCall
	p.sc = scanner{}
	p.name, p.nameDone, p.argsKey, p.argStr, p.emitted, p.mistralArgs = "", false, false, false, false, false
	p.pending.Reset()
	p.argBuf.Reset()
	p.n++
}

func (p *Parser) emitName(ev []Event) []Event {
	if p.emitted {
		return ev
	}
	p.emitted = true
	ev = append(ev, Event{Call: true, Index: p.n - 1, Name: p.name})
	if p.pending.Len() > 0 {
		ev = append(ev, Event{Call: true, Index: p.n - 1, Arguments: p.pending.String()})
		p.pending.Reset()
	}
	return ev
}

func (p *Parser) emitArgs(ev []Event, frag string) []Event {
	if frag == "" {
		return ev
	}
	if p.argStr {
		p.argBuf.WriteString(frag)
		return ev
	}
	if !p.emitted {
		p.pending.WriteString(frag)
		return ev
	}
	if k := len(ev); k > 0 && ev[k-1].Call && ev[k-1].Index == p.n-1 && ev[k-1].Name == "" {
		ev[k-1].Arguments += frag
		return ev
	}
	return append(ev, Event{Call: true, Index: p.n - 1, Arguments: frag})
}

// endMarker expects the syntax's end marker, then goes back to content.
func (p *Parser) endMarker(s string, ev []Event) (string, []Event) {
	s = strings.TrimLeft(s, " \t\r\n")
	if s == "" {
		return "", ev
	}
	if p.end == "" {
		p.mode = mBetween
		return s, ev
	}
	if len(s) < len(p.end) {
		if strings.HasPrefix(p.end, s) {
			p.hold = s
			return "", ev
		}
	} else if strings.HasPrefix(s, p.end) {
		p.mode = mText
		p.inArray, p.afterArr, p.afterCall = false, false, true
		return s[len(p.end):], ev
	}
	p.err = fmt.Errorf("%w: expected %s", ErrMalformed, p.end)
	return "", ev
}
