package chat

import (
	"fmt"
	"strings"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// The guards check, before gonja runs them, the filters and str methods whose
// output can be far larger than their input (a width, a count, a repetition),
// so that one call cannot ask for gigabytes. Go cannot recover from running out of
// memory, so the check must come before the allocation.

// argAt returns the positional argument i or the keyword argument name.
func argAt(args []*exec.Value, kwargs map[string]*exec.Value, i int, name string) *exec.Value {
	if v, ok := kwargs[name]; ok {
		return v
	}
	if i < len(args) {
		return args[i]
	}
	return nil
}

// tooWide reports whether the integer argument v asks for more than maxValueBytes.
func tooWide(v *exec.Value) bool {
	return v != nil && v.IsInteger() && v.Integer() > maxValueBytes
}

// listBytes estimates the text size of joining the items of v, stopping past limit.
func listBytes(v *exec.Value, limit int) int {
	n := 0
	for i := range v.Len() {
		it := v.Index(i)
		if it.IsString() {
			n += len(it.String())
		} else {
			n += 16 // numbers and such; lists and dicts of big strings are rare in joins
		}
		if n > limit {
			break
		}
	}
	return n
}

// replacedBytes is the length of s after replacing old by new count times (-1: all).
func replacedBytes(s, old, new string, count int) int {
	occ := len(s) + 1
	if old != "" {
		occ = strings.Count(s, old)
	}
	if count >= 0 && count < occ {
		occ = count
	}
	return len(s) + occ*(len(new)-len(old))
}

// formatTooWide reports whether a %-format or {}-format string holds a width or
// precision above maxValueBytes.
func formatTooWide(f string) bool {
	n := 0
	for i := 0; i < len(f); i++ {
		if c := f[i]; c >= '0' && c <= '9' {
			if n > maxValueBytes/10 {
				return true
			}
			n = n*10 + int(c-'0')
			continue
		}
		if n > maxValueBytes {
			return true
		}
		n = 0
	}
	return n > maxValueBytes
}

func guardErr(what string) error {
	return fmt.Errorf("%w: %s beyond %d bytes", ErrTooLarge, what, maxValueBytes)
}

// filterGuards check a filter's input and arguments; nil means go ahead.
var filterGuards = map[string]func(in *exec.Value, p *exec.VarArgs) error{
	"center": func(in *exec.Value, p *exec.VarArgs) error {
		if tooWide(argAt(p.Args, p.KwArgs, 0, "width")) {
			return guardErr("center")
		}
		return nil
	},
	"indent": func(in *exec.Value, p *exec.VarArgs) error {
		w := argAt(p.Args, p.KwArgs, 0, "width")
		lines := strings.Count(in.String(), "\n") + 1
		if w != nil && w.IsInteger() && w.Integer() > 0 && (w.Integer() > maxValueBytes || lines*w.Integer() > maxValueBytes) {
			return guardErr("indent")
		}
		if w != nil && w.IsString() && lines*len(w.String()) > maxValueBytes {
			return guardErr("indent")
		}
		return nil
	},
	"join": func(in *exec.Value, p *exec.VarArgs) error {
		if !in.IsList() {
			return nil
		}
		sep := argAt(p.Args, p.KwArgs, 0, "d")
		n := listBytes(in, maxValueBytes)
		if sep != nil {
			n += in.Len() * len(sep.String())
		}
		if n > maxValueBytes {
			return guardErr("join")
		}
		return nil
	},
	"replace": func(in *exec.Value, p *exec.VarArgs) error {
		old, new := argAt(p.Args, p.KwArgs, 0, "old"), argAt(p.Args, p.KwArgs, 1, "new")
		if old == nil || new == nil {
			return nil
		}
		count := -1
		if c := argAt(p.Args, p.KwArgs, 2, "count"); c != nil && c.IsInteger() {
			count = c.Integer()
		}
		if replacedBytes(in.String(), old.String(), new.String(), count) > maxValueBytes {
			return guardErr("replace")
		}
		return nil
	},
	"format": func(in *exec.Value, p *exec.VarArgs) error {
		if formatTooWide(in.String()) {
			return guardErr("format")
		}
		return nil
	},
	"batch": func(in *exec.Value, p *exec.VarArgs) error {
		if c := argAt(p.Args, p.KwArgs, 0, "linecount"); c != nil && c.IsInteger() && c.Integer() > MaxRange {
			return guardErr("batch")
		}
		return nil
	},
	"slice": func(in *exec.Value, p *exec.VarArgs) error {
		if c := argAt(p.Args, p.KwArgs, 0, "slices"); c != nil && c.IsInteger() && c.Integer() > MaxRange {
			return guardErr("slice")
		}
		return nil
	},
}

// guardFilters wraps the filters of filterGuards in set.
func guardFilters(set *exec.FilterSet) {
	for name, check := range filterGuards {
		inner, ok := set.Get(name)
		if !ok {
			continue
		}
		if err := set.Replace(name, func(e *exec.Evaluator, in *exec.Value, p *exec.VarArgs) *exec.Value {
			if !in.IsError() {
				if err := check(in, p); err != nil {
					return exec.AsValue(raise(err))
				}
			}
			return inner(e, in, p)
		}); err != nil {
			panic(err)
		}
	}
}

// methodGuards check str methods before they run.
var methodGuards = map[string]func(self string, p *exec.VarArgs) error{
	"center": widthGuard("center", 0, "width"),
	"ljust":  widthGuard("ljust", 0, "width"),
	"rjust":  widthGuard("rjust", 0, "width"),
	"zfill":  widthGuard("zfill", 0, "width"),
	"expandtabs": func(self string, p *exec.VarArgs) error {
		t := argAt(p.Args, p.KwArgs, 0, "tabsize")
		if t != nil && t.IsInteger() && t.Integer() > 0 &&
			(t.Integer() > maxValueBytes || (strings.Count(self, "\t")+1)*t.Integer() > maxValueBytes) {
			return guardErr("expandtabs")
		}
		return nil
	},
	"replace": func(self string, p *exec.VarArgs) error {
		old, new := argAt(p.Args, p.KwArgs, 0, "old"), argAt(p.Args, p.KwArgs, 1, "new")
		if old == nil || new == nil {
			return nil
		}
		count := -1
		if c := argAt(p.Args, p.KwArgs, 2, "count"); c != nil && c.IsInteger() {
			count = c.Integer()
		}
		if replacedBytes(self, old.String(), new.String(), count) > maxValueBytes {
			return guardErr("replace")
		}
		return nil
	},
	"join": func(self string, p *exec.VarArgs) error {
		l := argAt(p.Args, p.KwArgs, 0, "iterable")
		if l != nil && l.IsList() && listBytes(l, maxValueBytes)+l.Len()*len(self) > maxValueBytes {
			return guardErr("join")
		}
		return nil
	},
	"format": func(self string, p *exec.VarArgs) error {
		if formatTooWide(self) {
			return guardErr("format")
		}
		return nil
	},
}

func widthGuard(what string, i int, name string) func(string, *exec.VarArgs) error {
	return func(_ string, p *exec.VarArgs) error {
		if tooWide(argAt(p.Args, p.KwArgs, i, name)) {
			return guardErr(what)
		}
		return nil
	}
}

// guardMethods wraps the str methods of methodGuards in m.
func guardMethods(m map[string]exec.Method[string]) {
	for name, check := range methodGuards {
		inner, ok := m[name]
		if !ok {
			continue
		}
		m[name] = func(self string, sv *exec.Value, p *exec.VarArgs) (any, error) {
			if err := check(self, p); err != nil {
				return nil, raise(err)
			}
			return inner(self, sv, p)
		}
	}
}
