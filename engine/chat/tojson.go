package chat

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// filterToJSON is transformers' tojson: Python's json.dumps(x, ensure_ascii=False,
// indent=indent, separators=separators, sort_keys=sort_keys). gonja's own tojson
// writes Go's compact JSON, which differs from Python's (", " and ": " separators,
// no escaping of <, > and &), so the text a model was trained on would differ.
// Dict literals keep their order, as Python dicts do; Go maps (from the caller) are
// written with sorted keys.
func filterToJSON(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	enc := jsonEncoder{itemSep: ", ", keySep: ": ", indent: -1}
	var separators *exec.Value
	for k, v := range params.KwArgs {
		switch k {
		case "indent":
			switch {
			case v.IsNil():
			case v.IsInteger():
				enc.indent = min(max(v.Integer(), 0), 64)
				enc.itemSep = ","
			case v.IsString():
				enc.indentStr, enc.indent = v.String(), 0
				enc.itemSep = ","
			default:
				return exec.AsValue(fmt.Errorf("%w: tojson indent must be an integer", ErrRender))
			}
		case "sort_keys":
			enc.sortKeys = v.IsTrue()
		case "ensure_ascii":
			enc.ascii = v.IsTrue()
		case "separators":
			separators = v
		default:
			return exec.AsValue(fmt.Errorf("%w: tojson has no argument %q", ErrRender, k))
		}
	}
	if len(params.Args) > 0 && params.Args[0].IsInteger() {
		enc.indent = min(max(params.Args[0].Integer(), 0), 64)
		enc.itemSep = ","
	}
	if separators != nil && separators.IsList() && separators.Len() == 2 {
		enc.itemSep, enc.keySep = separators.Index(0).String(), separators.Index(1).String()
	}
	if enc.indent > 0 && enc.indentStr == "" {
		enc.indentStr = strings.Repeat(" ", enc.indent)
	}
	if err := enc.encode(reflect.ValueOf(in.Interface()), 0, 0); err != nil {
		return exec.AsValue(raise(err))
	}
	return exec.AsSafeValue(enc.b.String())
}

// PyJSON writes v as the template's tojson filter does (Python's json.dumps(v,
// ensure_ascii=False): ", " and ": " separators): template values such as
// OrderedDict and JSONValue results keep their key order, Go maps are sorted.
func PyJSON(v any) (string, error) {
	enc := jsonEncoder{itemSep: ", ", keySep: ": ", indent: -1}
	if err := enc.encode(reflect.ValueOf(v), 0, 0); err != nil {
		return "", err
	}
	return enc.b.String(), nil
}

type jsonEncoder struct {
	b               strings.Builder
	itemSep, keySep string
	indent          int // -1: no newlines
	indentStr       string
	sortKeys, ascii bool
}

const maxJSONDepth = 64

func (e *jsonEncoder) newline(level int) {
	if e.indent < 0 && e.indentStr == "" {
		return
	}
	e.b.WriteByte('\n')
	for range level {
		e.b.WriteString(e.indentStr)
	}
}

func (e *jsonEncoder) encode(v reflect.Value, level, depth int) error {
	if e.b.Len() > maxValueBytes {
		return fmt.Errorf("%w: tojson beyond %d bytes", ErrTooLarge, maxValueBytes)
	}
	if depth > maxJSONDepth {
		return fmt.Errorf("%w: tojson: nested deeper than %d", ErrRender, maxJSONDepth)
	}
	if !v.IsValid() {
		e.b.WriteString("null")
		return nil
	}
	if v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			e.b.WriteString("null")
			return nil
		}
		switch x := v.Interface().(type) {
		case *exec.Value:
			return e.encode(reflect.ValueOf(x.Interface()), level, depth+1)
		case *exec.Dict:
			keys := make([]string, len(x.Pairs))
			vals := make([]reflect.Value, len(x.Pairs))
			for i, p := range x.Pairs {
				keys[i] = p.Key.String()
				vals[i] = reflect.ValueOf(p.Value.Interface())
			}
			return e.object(keys, vals, level, depth)
		}
		return e.encode(v.Elem(), level, depth+1)
	}
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			e.b.WriteString("true")
		} else {
			e.b.WriteString("false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		e.b.WriteString(strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		e.b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		e.b.WriteString(pyFloat(v.Float()))
	case reflect.String:
		e.str(v.String())
	case reflect.Slice, reflect.Array:
		n := v.Len()
		if n == 0 {
			e.b.WriteString("[]")
			return nil
		}
		e.b.WriteByte('[')
		for i := range n {
			if i > 0 {
				e.b.WriteString(e.itemSep)
			}
			e.newline(level + 1)
			if err := e.encode(v.Index(i), level+1, depth+1); err != nil {
				return err
			}
		}
		e.newline(level)
		e.b.WriteByte(']')
	case reflect.Map:
		keys := make([]string, 0, v.Len())
		vals := map[string]reflect.Value{}
		for it := v.MapRange(); it.Next(); {
			k := fmt.Sprint(it.Key().Interface())
			keys = append(keys, k)
			vals[k] = it.Value()
		}
		slices.Sort(keys)
		ordered := make([]reflect.Value, len(keys))
		for i, k := range keys {
			ordered[i] = vals[k]
		}
		return e.object(keys, ordered, level, depth)
	default:
		return fmt.Errorf("%w: tojson: cannot encode %s", ErrRender, v.Type())
	}
	return nil
}

func (e *jsonEncoder) object(keys []string, vals []reflect.Value, level, depth int) error {
	if len(keys) == 0 {
		e.b.WriteString("{}")
		return nil
	}
	idx := make([]int, len(keys))
	for i := range idx {
		idx[i] = i
	}
	if e.sortKeys {
		slices.SortStableFunc(idx, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	}
	e.b.WriteByte('{')
	for n, i := range idx {
		if n > 0 {
			e.b.WriteString(e.itemSep)
		}
		e.newline(level + 1)
		e.str(keys[i])
		e.b.WriteString(e.keySep)
		if err := e.encode(vals[i], level+1, depth+1); err != nil {
			return err
		}
	}
	e.newline(level)
	e.b.WriteByte('}')
	return nil
}

// str writes s as Python's json module does.
func (e *jsonEncoder) str(s string) {
	e.b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			e.b.WriteString(`\"`)
		case '\\':
			e.b.WriteString(`\\`)
		case '\n':
			e.b.WriteString(`\n`)
		case '\r':
			e.b.WriteString(`\r`)
		case '\t':
			e.b.WriteString(`\t`)
		case '\b':
			e.b.WriteString(`\b`)
		case '\f':
			e.b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || (e.ascii && r == 0x7f):
				fmt.Fprintf(&e.b, `\u%04x`, r)
			case e.ascii && r > 0x7f:
				if r > 0xffff {
					r -= 0x10000
					fmt.Fprintf(&e.b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
				} else {
					fmt.Fprintf(&e.b, `\u%04x`, r)
				}
			default: // invalid UTF-8 comes out as U+FFFD
				e.b.WriteRune(r)
			}
		}
	}
	e.b.WriteByte('"')
}

// pyFloat formats f as Python's repr does (1.0, 0.5, 1e+16, NaN, Infinity).
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	abs := math.Abs(f)
	if abs != 0 && (abs < 1e-4 || abs >= 1e16) {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		// Go writes e+16 / e-05 as Python does.
		return s
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}
