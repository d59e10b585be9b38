package gateway

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/lmlite/lmlite/gateway/core"
)

// stdJSONError is the 400 for a body that encoding/json failed to decode: the field
// at fault and what it expects (an UnmarshalTypeError), an unknown member, or the
// syntax error, never Go's type names.
func stdJSONError(err error) *apiError {
	var ute *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &ute) && ute.Field != "":
		return badRequest(ute.Field, "invalid type for '"+ute.Field+"': expected "+core.TypeName(ute.Type)+", got "+articled(ute.Value))
	case errors.As(err, &ute):
		return badRequest("body", "the body must be a JSON object, not "+articled(ute.Value))
	case errors.As(err, &se):
		return badRequest("body", "invalid JSON at byte "+strconv.FormatInt(se.Offset, 10)+": "+strings.TrimPrefix(se.Error(), "json: "))
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return badRequest(name, "unrecognized request argument supplied: "+name)
	}
	return badRequest("body", "invalid JSON: "+strings.TrimPrefix(err.Error(), "json: "))
}

// articled is encoding/json's name of a JSON value's kind ("number", "string",
// "object", "array", "bool", "number 1.5") with its article, as kindName says them.
func articled(v string) string {
	v, _, _ = strings.Cut(v, " ") // "number 1.5": the kind
	switch v {
	case "number", "string", "object", "array":
		return core.KindName(map[string]jsontext.Kind{"number": '0', "string": '"', "object": '{', "array": '['}[v])
	case "bool":
		return "a boolean"
	case "null":
		return "null"
	}
	return "a JSON " + v
}
