package core

import (
	"bytes"
	"errors"
	"reflect"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// InvalidUTF8Field names the field (like "messages[0].content") whose value holds
// the first invalid UTF-8 of body, reading it with the same JSON library that decodes
// requests (jsontext reports where it met the bad bytes as a JSON pointer); "" when
// it is in a member name.
func InvalidUTF8Field(body []byte) string {
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

// FieldErrorIn turns a decoding error into the name of the field at fault and a
// message that says what was expected there. For a value decoded on its own from the
// member named in (like "tools" or "response_format"; "" for the body), the field is
// named from the request's top (tools[0].function), in the parameter and the message
// alike.
func FieldErrorIn(err error, in string) (param, msg string) {
	var se *jsonv2.SemanticError
	var xe *jsontext.SyntacticError
	within := func(f string) string {
		switch {
		case in == "":
			return f
		case f == "":
			return in
		case strings.HasPrefix(f, "["):
			return in + f
		}
		return in + "." + f
	}
	top := "body"
	if in != "" {
		top = in
	}
	switch {
	case errors.As(err, &se):
		f := within(pointerField(se.JSONPointer))
		if errors.Is(se.Err, jsonv2.ErrUnknownName) {
			if f == "" {
				return top, `unrecognized request argument supplied: ""`
			}
			return f, "unrecognized request argument supplied: " + f
		}
		if f == "" {
			f = top
		}
		if se.GoType != nil && se.JSONKind != 0 {
			return f, "invalid type for '" + f + "': expected " + TypeName(se.GoType) + ", got " + KindName(se.JSONKind)
		}
		if se.GoType != nil && se.Err != nil {
			return f, "invalid value for '" + f + "': expected " + TypeName(se.GoType) + " (" + se.Err.Error() + ")"
		}
		return f, "invalid value for '" + f + "': " + se.Error()
	case errors.As(err, &xe):
		if f := within(pointerField(xe.JSONPointer)); f != "" && errors.Is(xe.Err, jsontext.ErrDuplicateName) {
			return f, "invalid JSON: '" + f + "' is given twice"
		}
		return top, "invalid JSON: " + xe.Error()
	}
	return top, "invalid JSON: " + err.Error()
}

// pointerField turns a JSON pointer (/messages/0/content) into a field name
// (messages[0].content); a pointer into an array starts with its index ([0].name).
func pointerField(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.Atoi(tok); err == nil {
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

// TypeName names what a Go type decodes from, for a client: a string, an integer,
// a number, a boolean, an array or an object (never the Go type's own name).
func TypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[jsontext.Value]() || t.Kind() == reflect.Interface {
		return "a JSON value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.String {
			return "an array of strings"
		}
		return "an array"
	case reflect.Map:
		if t.Elem().Kind() == reflect.String {
			return "an object of strings"
		}
		return "an object"
	case reflect.Struct:
		return "an object"
	}
	return "a JSON value"
}

// KindName names a JSON kind for a client.
func KindName(k jsontext.Kind) string {
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
