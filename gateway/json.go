package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, and
// U+2028/U+2029 are escaped so that the output is safe in any JSON consumer.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			switch r {
			case '\u2028':
				b = append(b, `\u2028`...)
			case '\u2029':
				b = append(b, `\u2029`...)
			default:
				b = append(b, `\ufffd`...)
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// fieldAt returns the JSON path (like "messages[0].content") of the value that holds
// byte offset off of body, for naming the field with invalid UTF-8. It walks the
// tokens of the document with encoding/json's streaming decoder.
func fieldAt(body []byte, off int) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		obj   bool
		key   string
		index int
		want  bool // object: the next string is a key
	}
	var stack []frame
	path := func() string {
		var sb strings.Builder
		for i, f := range stack {
			if f.obj {
				if f.key == "" {
					continue
				}
				if i > 0 && sb.Len() > 0 {
					sb.WriteByte('.')
				}
				sb.WriteString(f.key)
			} else {
				sb.WriteString("[" + strconv.Itoa(f.index) + "]")
			}
		}
		return sb.String()
	}
	for {
		before := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return path()
		}
		after := dec.InputOffset()
		top := len(stack) - 1
		isKey := top >= 0 && stack[top].obj && stack[top].want
		if isKey {
			if s, ok := tok.(string); ok {
				stack[top].key = s
				stack[top].want = false
				if int(before) <= off && off < int(after) {
					return path()
				}
				continue
			}
		}
		if int(before) <= off && off < int(after) {
			return path()
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{obj: true, want: true})
			continue
		case json.Delim('['):
			stack = append(stack, frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// a value ended: advance the parent
		if top = len(stack) - 1; top >= 0 {
			if stack[top].obj {
				stack[top].want = true
			} else {
				stack[top].index++
			}
		}
	}
}

// jsonFieldError turns an encoding/json error into the name of the field at fault.
func jsonFieldError(err error) (param, msg string) {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		f := strings.TrimPrefix(te.Field, "commonParams.")
		if f == "" {
			f = "body"
		}
		return f, "invalid type for '" + f + "': expected " + te.Type.String()
	case errors.As(err, &se):
		return "body", "invalid JSON: " + se.Error()
	}
	s := err.Error()
	if rest, ok := strings.CutPrefix(s, "json: unknown field "); ok {
		f := strings.TrimPrefix(strings.Trim(rest, `"`), "commonParams.")
		if f == "" {
			return "body", `unrecognized request argument supplied: ""`
		}
		return f, "unrecognized request argument supplied: " + f
	}
	if errors.Is(err, errEOFBody) || strings.Contains(s, "EOF") {
		return "body", "invalid JSON: unexpected end of input"
	}
	return "body", "invalid JSON: " + s
}

var errEOFBody = errors.New("EOF")
