// Package core is the vocabulary the gateway's codecs decode a request into and
// share with the gateway's core, without depending on it: a field's error (a 400
// naming the field in its API's terms), the strict JSON decoding every wire format
// uses (DecodeBody, Strict: an unknown member is an error naming it) and the body's
// "lmlite" routing fields; and the result a codec renders (result.go: the Events of
// a stream, the Whole of an answer, the request's Meta, the Output a codec package
// implements, the Error it renders). The gateway (package gateway) turns a
// FieldError into its own error, answered in the codec's shape; a codec package
// (gateway/openai, gateway/anthropic) imports core, never gateway, so there is no
// import cycle.
package core

import (
	"bytes"
	"strconv"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// FieldError is a request refused as a bad request (HTTP 400): Param names the
// field at fault ("body" for the whole), Message says what is wrong, naming it.
type FieldError struct {
	Param, Message string
}

func (e *FieldError) Error() string { return e.Message }

// Bad is the FieldError of param with msg.
func Bad(param, msg string) *FieldError { return &FieldError{Param: param, Message: msg} }

// LMLiteFields are the routing fields of the body's "lmlite" object.
type LMLiteFields struct {
	TierMode     string   `json:"tier_mode"`
	Tier         string   `json:"tier"`
	MaxLatencyMS *float64 `json:"max_latency_ms"`
	MaxCostUSD   *float64 `json:"max_cost_usd"`
	KeepAlive    *string  `json:"keep_alive"`  // a Go duration ("30s", "5m"): the model's stay after the request, as the gateway's keepalive.go allows
	Speculative  *bool    `json:"speculative"` // false: decode plainly (engine.Request.NoSpeculation; the gateway's prediction.go)
}

// StrictJSON refuses members the request types do not have, so that a parameter the
// server does not know is an error naming it rather than silently ignored.
var StrictJSON = jsonv2.RejectUnknownMembers(true)

// DecodeBody checks the body's encoding and decodes it strictly into v. It uses
// github.com/go-json-experiment/json (encoding/json/v2 as a module), which decodes a
// request in well under half the time and allocations of encoding/json's Decoder
// (BenchmarkDecodeBody) and names the member at fault with a JSON pointer; member
// names match case-sensitively, as OpenAI's API does, and a duplicate member is an
// error.
func DecodeBody(body []byte, v any) *FieldError {
	if len(bytes.TrimSpace(body)) == 0 {
		return Bad("body", "the request body is empty; expected a JSON object")
	}
	if !utf8.Valid(body) {
		off := invalidUTF8Offset(body)
		f := InvalidUTF8Field(body)
		if f == "" {
			f = "body"
		}
		return Bad(f, "invalid UTF-8 in '"+f+"' (byte offset "+strconv.Itoa(off)+")")
	}
	if err := jsonv2.Unmarshal(body, v, StrictJSON); err != nil {
		return Bad(FieldErrorIn(err, ""))
	}
	return nil
}

// Strict decodes raw (the value of the member field) into v refusing unknown
// members, naming field in errors.
func Strict(raw jsontext.Value, v any, field string) *FieldError {
	if err := jsonv2.Unmarshal(raw, v, StrictJSON); err != nil {
		return Bad(FieldErrorIn(err, field))
	}
	return nil
}

func invalidUTF8Offset(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// IsNull reports whether r is absent or JSON null.
func IsNull(r jsontext.Value) bool {
	t := bytes.TrimSpace(r)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// OneOf reports whether s is one of set.
func OneOf(s string, set ...string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}
