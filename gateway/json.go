package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"strconv"
	"strings"
)

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

// jsonFieldError turns a decoding error into the name of the field at fault.
func jsonFieldError(err error) (param, msg string) {
	var se *jsonv2.SemanticError
	var xe *jsontext.SyntacticError
	switch {
	case errors.As(err, &se):
		f := pointerField(se.JSONPointer)
		if errors.Is(se.Err, jsonv2.ErrUnknownName) {
			if f == "" {
				return "body", `unrecognized request argument supplied: ""`
			}
			return f, "unrecognized request argument supplied: " + f
		}
		if f == "" {
			f = "body"
		}
		if se.GoType != nil && se.JSONKind != 0 {
			return f, "invalid type for '" + f + "': expected " + goTypeName(se.GoType.String()) + ", got " + kindName(se.JSONKind)
		}
		return f, "invalid value for '" + f + "': " + se.Error()
	case errors.As(err, &xe):
		if f := pointerField(xe.JSONPointer); f != "" && errors.Is(xe.Err, jsontext.ErrDuplicateName) {
			return f, "invalid JSON: '" + f + "' is given twice"
		}
		return "body", "invalid JSON: " + xe.Error()
	}
	return "body", "invalid JSON: " + err.Error()
}

// pointerField turns a JSON pointer (/messages/0/content) into a field name
// (messages[0].content).
func pointerField(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.Atoi(tok); err == nil && b.Len() > 0 {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// goTypeName names a Go type for a client: *int is "int", json.RawMessage "JSON".
func goTypeName(t string) string {
	t = strings.TrimLeft(t, "*")
	switch t {
	case "json.RawMessage":
		return "a JSON value"
	case "gateway.lmliteFields", "gateway.streamOptions", "gateway.chatRequest", "gateway.completionRequest", "map[string]interface {}":
		return "an object"
	case "float64":
		return "a number"
	case "int", "int64":
		return "an integer"
	case "[]gateway.chatMessage", "[]string":
		return "an array"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	}
	return t
}

// kindName names a JSON kind for a client.
func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "a JSON " + k.String()
}
