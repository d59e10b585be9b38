package chat

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// strMethodNames are Python's str methods; newMethods copies gonja's and replaces
// split and rsplit, whose maxsplit is off by one in gonja and whose separator
// defaults to " " instead of runs of whitespace.
var strMethodNames = []string{
	"capitalize", "capwords", "casefold", "center", "count", "encode", "endswith",
	"expandtabs", "find", "format", "format_map", "index", "isalnum", "isalpha",
	"isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
	"isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip",
	"partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust",
	"rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip",
	"swapcase", "title", "upper", "zfill",
}

func newMethods() exec.Methods {
	m := builtins.Methods
	str := map[string]exec.Method[string]{}
	for _, name := range strMethodNames {
		if fn, ok := m.Str.Get(name); ok {
			str[name] = fn
		}
	}
	str["split"] = func(self string, _ *exec.Value, va *exec.VarArgs) (any, error) {
		sep, maxsplit, err := splitArgs(va)
		if err != nil {
			return nil, err
		}
		return pySplit(self, sep, maxsplit, false), nil
	}
	str["rsplit"] = func(self string, _ *exec.Value, va *exec.VarArgs) (any, error) {
		sep, maxsplit, err := splitArgs(va)
		if err != nil {
			return nil, err
		}
		return pySplit(self, sep, maxsplit, true), nil
	}
	str["replace"] = strReplace
	str["strip"] = stripMethod("strip", strings.Trim, strings.TrimSpace)
	str["lstrip"] = stripMethod("lstrip", strings.TrimLeft, func(s string) string { return strings.TrimLeftFunc(s, unicode.IsSpace) })
	str["rstrip"] = stripMethod("rstrip", strings.TrimRight, func(s string) string { return strings.TrimRightFunc(s, unicode.IsSpace) })
	guardMethods(str)
	m.Str = exec.NewMethodSet(str)
	m.Dict = newDictMethods(m.Dict)
	return m
}

// stripMethod is Python's str.strip, lstrip or rstrip(chars=None): without chars
// (or with None) whitespace goes; gonja's lstrip and rstrip fail without an argument.
func stripMethod(name string, cut func(s, cutset string) string, space func(string) string) exec.Method[string] {
	return func(self string, _ *exec.Value, va *exec.VarArgs) (any, error) {
		args := va.Args
		if v, ok := va.KwArgs["chars"]; ok {
			args = append(args, v)
		}
		switch {
		case len(args) > 1:
			return nil, fmt.Errorf("%w: %s takes at most 1 argument", ErrRender, name)
		case len(args) == 0 || args[0].IsNil():
			return space(self), nil
		case !args[0].IsString():
			return nil, fmt.Errorf("%w: %s arg must be None or str", ErrRender, name)
		}
		return cut(self, args[0].String()), nil
	}
}

// splitArgs reads split's (sep=None, maxsplit=-1); a nil sep means whitespace.
func splitArgs(va *exec.VarArgs) (sep *string, maxsplit int, err error) {
	maxsplit = -1
	args := va.Args
	if v, ok := va.KwArgs["sep"]; ok {
		args = append([]*exec.Value{v}, args...)
	}
	if v, ok := va.KwArgs["maxsplit"]; ok {
		for len(args) < 1 {
			args = append(args, exec.AsValue(nil))
		}
		args = append(args[:1], v)
	}
	if len(args) > 2 {
		return nil, 0, fmt.Errorf("%w: split takes at most 2 arguments", ErrRender)
	}
	if len(args) > 0 && !args[0].IsNil() {
		s := args[0].String()
		if s == "" {
			return nil, 0, fmt.Errorf("%w: split: empty separator", ErrRender)
		}
		sep = &s
	}
	if len(args) > 1 {
		if !args[1].IsInteger() {
			return nil, 0, fmt.Errorf("%w: split: maxsplit must be an integer", ErrRender)
		}
		maxsplit = args[1].Integer()
	}
	return sep, maxsplit, nil
}

// pySplit is Python's str.split / str.rsplit.
func pySplit(s string, sep *string, maxsplit int, right bool) []any {
	var parts []string
	switch {
	case sep != nil && maxsplit < 0:
		parts = strings.Split(s, *sep)
	case sep != nil && !right:
		parts = strings.SplitN(s, *sep, maxsplit+1)
	case sep != nil:
		for maxsplit > 0 {
			i := strings.LastIndex(s, *sep)
			if i < 0 {
				break
			}
			parts = append(parts, s[i+len(*sep):])
			s = s[:i]
			maxsplit--
		}
		parts = append(parts, s)
		reverse(parts)
	case maxsplit < 0:
		parts = strings.FieldsFunc(s, unicode.IsSpace)
	case !right:
		rest := strings.TrimLeftFunc(s, unicode.IsSpace)
		for maxsplit > 0 && rest != "" {
			i := strings.IndexFunc(rest, unicode.IsSpace)
			if i < 0 {
				break
			}
			parts = append(parts, rest[:i])
			rest = strings.TrimLeftFunc(rest[i:], unicode.IsSpace)
			maxsplit--
		}
		if rest != "" {
			parts = append(parts, rest)
		}
	default:
		rest := strings.TrimRightFunc(s, unicode.IsSpace)
		for maxsplit > 0 && rest != "" {
			i := strings.LastIndexFunc(rest, unicode.IsSpace)
			if i < 0 {
				break
			}
			_, size := utf8.DecodeRuneInString(rest[i:])
			parts = append(parts, rest[i+size:])
			rest = strings.TrimRightFunc(rest[:i], unicode.IsSpace)
			maxsplit--
		}
		if rest != "" {
			parts = append(parts, rest)
		}
		reverse(parts)
	}
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out
}

func reverse(s []string) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}
