package gateway

import (
	"bytes"
	"errors"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// invalidUTF8Field names the field (like "messages[0].content") whose value holds
// the first invalid UTF-8 of body, reading it with the same JSON library that decodes
// requests (jsontext reports where it met the bad bytes as a JSON pointer); "" when
// it is in a member name.
func invalidUTF8Field(body []byte) string {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	for {
		if _, err := dec.ReadToken(); err != nil {
			var xe *jsontext.SyntacticError
			if errors.As(err, &xe) {
				return pointerField(xe.JSONPointer)
			}
			return ""
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

// goTypeName names a Go type for a client: *int is "int", jsontext.Value "JSON".
func goTypeName(t string) string {
	t = strings.TrimLeft(t, "*")
	switch t {
	case "jsontext.Value":
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
