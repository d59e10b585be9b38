package chat

import (
	"fmt"
	"sort"
	"strings"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// Dicts keep their keys in insertion order, as Python's do, and templates depend on
// it: Mistral's writes each tool's function with tool.items(), so the order of
// name, description and parameters in the prompt is the order of the request.
// gonja's dict methods convert the dict to a Go map first, which sorts the keys
// and turns the nested dicts into maps too (so that a dict found through get()
// would then be written by tojson with sorted keys). These replace keys, values,
// items and get, and the items filter (which gonja leaves empty for its own dicts).

// dictPairs returns the keys and values of a dict in order: insertion order for
// template dicts, sorted keys for Go maps.
func dictPairs(d *exec.Value) (keys, vals []*exec.Value) {
	for _, k := range d.Keys() {
		v, _ := d.GetItem(k.Interface())
		keys = append(keys, k)
		vals = append(vals, v)
	}
	return keys, vals
}

func noArgs(name string, va *exec.VarArgs) error {
	if len(va.Args) > 0 || len(va.KwArgs) > 0 {
		return fmt.Errorf("%w: %s() takes no arguments", ErrRender, name)
	}
	return nil
}

func newDictMethods(base *exec.MethodSet[map[string]any]) *exec.MethodSet[map[string]any] {
	m := map[string]exec.Method[map[string]any]{}
	// The mutating methods stay gonja's: they work on a copy, so a template cannot
	// change the caller's data through them.
	for _, name := range []string{"pop", "setdefault", "update", "clear", "copy"} {
		if fn, ok := base.Get(name); ok {
			m[name] = fn
		}
	}
	m["keys"] = func(_ map[string]any, self *exec.Value, va *exec.VarArgs) (any, error) {
		if err := noArgs("keys", va); err != nil {
			return nil, err
		}
		keys, _ := dictPairs(self)
		out := make([]any, len(keys))
		for i, k := range keys {
			out[i] = k.Interface()
		}
		return out, nil
	}
	m["values"] = func(_ map[string]any, self *exec.Value, va *exec.VarArgs) (any, error) {
		if err := noArgs("values", va); err != nil {
			return nil, err
		}
		_, vals := dictPairs(self)
		out := make([]any, len(vals))
		for i, v := range vals {
			out[i] = v.Interface()
		}
		return out, nil
	}
	m["items"] = func(_ map[string]any, self *exec.Value, va *exec.VarArgs) (any, error) {
		if err := noArgs("items", va); err != nil {
			return nil, err
		}
		return itemsOf(self), nil
	}
	m["get"] = func(_ map[string]any, self *exec.Value, va *exec.VarArgs) (any, error) {
		if len(va.Args) < 1 || len(va.Args) > 2 || len(va.KwArgs) > 0 {
			return nil, fmt.Errorf("%w: get() takes 1 or 2 arguments", ErrRender)
		}
		keys, vals := dictPairs(self)
		for i, k := range keys {
			if k.EqualValueTo(va.Args[0]) {
				return vals[i].Interface(), nil
			}
		}
		if len(va.Args) == 2 {
			return va.Args[1].Interface(), nil
		}
		return nil, nil
	}
	return exec.NewMethodSet(m)
}

// itemsOf is the list of [key, value] pairs of a dict, in its order.
func itemsOf(d *exec.Value) []any {
	keys, vals := dictPairs(d)
	out := make([]any, len(keys))
	for i := range keys {
		out[i] = []any{keys[i].Interface(), vals[i].Interface()}
	}
	return out
}

// filterItems is jinja2's items filter: a dict's (key, value) pairs in order, an
// empty list for none.
func filterItems(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	if len(params.Args) > 0 || len(params.KwArgs) > 0 {
		return exec.AsValue(fmt.Errorf("%w: items takes no arguments", ErrRender))
	}
	switch {
	case in.IsNil():
		return exec.AsValue([]any{})
	case !in.IsDict():
		return exec.AsValue(fmt.Errorf("%w: items of %s, not a mapping", ErrRender, in.String()))
	}
	return exec.AsValue(itemsOf(in))
}

// filterDictSort is jinja2's dictsort(case_sensitive=False, by='key',
// reverse=False): a dict's (key, value) pairs sorted by key or value, strings
// compared case-insensitively unless asked; gonja's gives nothing for template
// dicts (Gemma 4's template sorts the tools' parameters with it).
func filterDictSort(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	caseSensitive, by, reverse := false, "key", false
	args := params.Args
	for i, name := range []string{"case_sensitive", "by", "reverse"} {
		v, ok := params.KwArgs[name]
		if i < len(args) {
			v, ok = args[i], true
		}
		if !ok {
			continue
		}
		switch name {
		case "case_sensitive":
			caseSensitive = v.IsTrue()
		case "by":
			by = v.String()
		case "reverse":
			reverse = v.IsTrue()
		}
	}
	switch {
	case len(args) > 3:
		return exec.AsValue(fmt.Errorf("%w: dictsort takes at most 3 arguments", ErrRender))
	case by != "key" && by != "value":
		return exec.AsValue(fmt.Errorf("%w: dictsort: you can only sort by either 'key' or 'value'", ErrRender))
	case in.IsNil():
		return exec.AsValue([]any{})
	case !in.IsDict():
		return exec.AsValue(fmt.Errorf("%w: dictsort of %s, not a mapping", ErrRender, in.String()))
	}
	keys, vals := dictPairs(in)
	idx := make([]int, len(keys))
	for i := range idx {
		idx[i] = i
	}
	sortKey := func(i int) *exec.Value {
		if by == "key" {
			return keys[i]
		}
		return vals[i]
	}
	var failed error
	sort.SliceStable(idx, func(a, b int) bool {
		x, y := sortKey(idx[a]), sortKey(idx[b])
		if reverse {
			x, y = y, x
		}
		less, err := lessValues(x, y, caseSensitive)
		if err != nil && failed == nil {
			failed = err
		}
		return less
	})
	if failed != nil {
		return exec.AsValue(failed)
	}
	out := make([]any, len(idx))
	for i, k := range idx {
		out[i] = []any{keys[k].Interface(), vals[k].Interface()}
	}
	return exec.AsValue(out)
}

// lessValues orders two values as Python's < does for the types templates sort:
// strings (case-folded unless caseSensitive), numbers, booleans.
func lessValues(x, y *exec.Value, caseSensitive bool) (bool, error) {
	switch {
	case x.IsString() && y.IsString():
		a, b := x.String(), y.String()
		if !caseSensitive {
			a, b = strings.ToLower(a), strings.ToLower(b)
		}
		return a < b, nil
	case x.IsNumber() && y.IsNumber():
		return x.Float() < y.Float(), nil
	case x.IsBool() && y.IsBool():
		return !x.Bool() && y.Bool(), nil
	}
	return false, fmt.Errorf("%w: dictsort: cannot compare %s and %s", ErrRender, x.String(), y.String())
}

// testTrue and testFalse are jinja2's "is true" and "is false": the value is the
// boolean itself (jinja2 tests "value is True"), not any truthy or falsy value;
// gonja's say an undefined variable "is false".
func testTrue(_ *exec.Context, in *exec.Value, _ *exec.VarArgs) (bool, error) {
	return in.IsBool() && in.Bool(), nil
}

func testFalse(_ *exec.Context, in *exec.Value, _ *exec.VarArgs) (bool, error) {
	return in.IsBool() && !in.Bool(), nil
}

// strReplace is Python's str.replace(old, new[, count]); gonja's requires count.
func strReplace(self string, _ *exec.Value, va *exec.VarArgs) (any, error) {
	args := va.Args
	for i, name := range []string{"old", "new", "count"} {
		if v, ok := va.KwArgs[name]; ok {
			for len(args) <= i {
				args = append(args, nil)
			}
			args[i] = v
		}
	}
	if len(args) < 2 || len(args) > 3 || args[0] == nil || args[1] == nil || !args[0].IsString() || !args[1].IsString() {
		return nil, fmt.Errorf("%w: replace takes two strings and an optional count", ErrRender)
	}
	count := -1
	if len(args) == 3 {
		if args[2] == nil || !args[2].IsInteger() {
			return nil, fmt.Errorf("%w: replace: count must be an integer", ErrRender)
		}
		count = args[2].Integer()
	}
	return strings.Replace(self, args[0].String(), args[1].String(), count), nil
}
