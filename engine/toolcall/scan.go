package toolcall

import (
	"encoding/json"
	"fmt"
)

// scanner follows one call object {"name": ..., "arguments": ...} byte by byte.
type scanner struct {
	depth  int // 1 inside the call object
	state  sstate
	key    []byte // the current key's raw JSON text
	val    []byte // the name's raw JSON text
	vdepth int    // nesting inside the current value
	inStr  bool
	esc    bool
	args   bool // an arguments value was seen
}

type sstate int

const (
	sStart sstate = iota
	sKey
	sKeyStr
	sColon
	sValue
	sInValue
	sInPrim
	sAfter
)

// mistralArgs: the arguments value is scanned alone (Mistral's name[ARGS]{...}).
// (A field of Parser, declared here beside its use.)

// call scans the call object.
func (p *Parser) call(s string, ev []Event) (string, []Event) {
	sc := &p.sc
	i := 0
	for i < len(s) {
		c := s[i]
		switch sc.state {
		case sStart:
			if isSpace(c) {
				i++
				continue
			}
			if c != '{' {
				p.err = fmt.Errorf("%w: a call starts with %q", ErrMalformed, c)
				return "", ev
			}
			sc.depth, sc.state = 1, sKey
			i++
		case sKey:
			switch {
			case isSpace(c):
				i++
			case c == '"':
				sc.key = append(sc.key[:0], c)
				sc.state, sc.esc = sKeyStr, false
				i++
			case c == '}':
				return s[i+1:], p.finishCall(ev)
			default:
				p.err = fmt.Errorf("%w: a key starts with %q", ErrMalformed, c)
				return "", ev
			}
		case sKeyStr:
			sc.key = append(sc.key, c)
			i++
			if sc.esc {
				sc.esc = false
			} else if c == '\\' {
				sc.esc = true
			} else if c == '"' {
				sc.state = sColon
			}
			if len(sc.key) > 1024 {
				p.err = fmt.Errorf("%w: a key longer than 1 KiB", ErrMalformed)
				return "", ev
			}
		case sColon:
			if isSpace(c) {
				i++
				continue
			}
			if c != ':' {
				p.err = fmt.Errorf("%w: %q after a key", ErrMalformed, c)
				return "", ev
			}
			sc.state = sValue
			i++
			var k string
			if json.Unmarshal(sc.key, &k) != nil {
				p.err = fmt.Errorf("%w: a bad key", ErrMalformed)
				return "", ev
			}
			p.argsKey = k == "arguments" || k == "parameters"
			p.nameKey = k == "name"
		case sValue:
			if isSpace(c) {
				i++
				continue
			}
			sc.vdepth, sc.inStr, sc.esc = 0, false, false
			switch c {
			case '{', '[':
				sc.vdepth = 1
				sc.state = sInValue
			case '"':
				sc.inStr = true
				sc.state = sInValue
			default:
				sc.state = sInPrim
			}
			if p.argsKey {
				sc.args = true
				p.argStr = c == '"'
			}
			if p.nameKey {
				sc.val = sc.val[:0]
			}
			// The value's first byte is scanned below with the rest.
			j, done := p.scanValue(s[i:], true)
			ev = p.sink(ev, s[i:i+j])
			i += j
			if done {
				if ev = p.valueDone(ev); p.err != nil {
					return "", ev
				}
				if p.mistralArgs {
					return s[i:], p.finishCall(ev)
				}
			}
		case sInValue, sInPrim:
			j, done := p.scanValue(s[i:], false)
			ev = p.sink(ev, s[i:i+j])
			i += j
			if done {
				if ev = p.valueDone(ev); p.err != nil {
					return "", ev
				}
				if p.mistralArgs {
					return s[i:], p.finishCall(ev)
				}
			}
		case sAfter:
			switch {
			case isSpace(c):
				i++
			case c == ',':
				sc.state = sKey
				i++
			case c == '}':
				return s[i+1:], p.finishCall(ev)
			default:
				p.err = fmt.Errorf("%w: %q after a value", ErrMalformed, c)
				return "", ev
			}
		}
	}
	return "", ev
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// scanValue consumes bytes of the current value from s; it returns how many and
// whether the value ended (a primitive ends before the byte that is not its own).
func (p *Parser) scanValue(s string, first bool) (int, bool) {
	sc := &p.sc
	for i := 0; i < len(s); i++ {
		c := s[i]
		if first && i == 0 {
			if sc.state == sInPrim {
				continue
			}
			continue // '{', '[' or '"': counted when the value began
		}
		if sc.state == sInPrim {
			if c == ',' || c == '}' || c == ']' || isSpace(c) {
				return i, true
			}
			continue
		}
		if sc.inStr {
			if sc.esc {
				sc.esc = false
			} else if c == '\\' {
				sc.esc = true
			} else if c == '"' {
				sc.inStr = false
				if sc.vdepth == 0 {
					return i + 1, true
				}
			}
			continue
		}
		switch c {
		case '"':
			sc.inStr = true
		case '{', '[':
			sc.vdepth++
			if sc.vdepth > 512 {
				p.err = fmt.Errorf("%w: arguments nested deeper than 512", ErrMalformed)
				return len(s), false
			}
		case '}', ']':
			sc.vdepth--
			if sc.vdepth == 0 {
				return i + 1, true
			}
		}
	}
	return len(s), false
}

// sink forwards a value's bytes: the name's to its buffer, the arguments' out.
func (p *Parser) sink(ev []Event, b string) []Event {
	switch {
	case p.nameKey:
		if len(p.sc.val)+len(b) > 4096 {
			p.err = fmt.Errorf("%w: a name longer than 4 KiB", ErrMalformed)
			return ev
		}
		p.sc.val = append(p.sc.val, b...)
	case p.argsKey:
		ev = p.emitArgs(ev, b)
	}
	return ev
}

// valueDone ends the current value.
func (p *Parser) valueDone(ev []Event) []Event {
	p.sc.state = sAfter
	if p.nameKey {
		if p.err != nil { // a name over 4 KiB (sink): keep that error
			return ev
		}
		var name string
		if json.Unmarshal(p.sc.val, &name) != nil || name == "" {
			p.err = fmt.Errorf("%w: the name is not a non-empty string", ErrMalformed)
			return ev
		}
		p.name, p.nameDone = name, true
		ev = p.emitName(ev)
	}
	if p.argsKey && p.argStr {
		var args string
		if json.Unmarshal([]byte(p.argBuf.String()), &args) != nil {
			p.err = fmt.Errorf("%w: the arguments string does not parse", ErrMalformed)
			return ev
		}
		p.argStr = false
		p.argBuf.Reset()
		ev = p.emitArgs(ev, args)
	}
	p.nameKey, p.argsKey = false, false
	return ev
}

// finishCall ends the call object.
func (p *Parser) finishCall(ev []Event) []Event {
	if !p.nameDone {
		p.err = fmt.Errorf("%w: a call without a name", ErrMalformed)
		return ev
	}
	if !p.sc.args {
		ev = p.emitArgs(ev, "{}")
	}
	p.mistralArgs = false
	p.mode = mBetween
	if p.end != "" && !p.inArray {
		p.mode = mEnd
	}
	return ev
}

// Parse parses a whole output: its content (the text outside calls) and its calls.
func Parse(syn Syntax, text string) (string, []Call, error) {
	p := New(syn)
	ev := p.Feed(text)
	tail, err := p.Finish()
	content, calls := Collect(append(ev, tail...))
	return content, calls, err
}

// Collect joins events into content and complete calls.
func Collect(ev []Event) (string, []Call) {
	var content []byte
	var calls []Call
	for _, e := range ev {
		if !e.Call {
			content = append(content, e.Content...)
			continue
		}
		for len(calls) <= e.Index {
			calls = append(calls, Call{})
		}
		if e.Name != "" {
			calls[e.Index].Name = e.Name
		}
		calls[e.Index].Arguments += e.Arguments
	}
	return string(content), calls
}
