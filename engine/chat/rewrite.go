package chat

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// After parsing, the template's syntax tree is rewritten so that three operations
// go through functions of this package instead of gonja's evaluator:
//
//   - x[i] (getitem): gonja misses Python's negative indexing at -len(x)
//     (messages[-1] with one message gives None) and indexes strings by byte;
//   - a * b (mul): gonja's string repetition has no bound, and a template could
//     ask for terabytes (Go cannot recover from running out of memory);
//   - a ** b (pow): gonja always gives a float (2 ** 3 renders "8.0", Python "8");
//   - a + b and a ~ b (add, concat): bounded, or a loop that doubles a string
//     would need exabytes after sixty iterations.
//
// The names of the functions are not identifiers, so templates cannot call them.
const (
	fnGetItem = "\x00getitem"
	fnMul     = "\x00mul"
	fnPow     = "\x00pow"
	fnAdd     = "\x00add"
	fnConcat  = "\x00concat"
	fnTick    = "\x00tick"
)

// maxValueBytes bounds strings and lists built by repetition.
const maxValueBytes = 4 << 20

var (
	tokenType = reflect.TypeFor[*tokens.Token]()
	nodeType  = reflect.TypeFor[nodes.Node]()
)

// rewriteTree rewrites the tree under root in place.
func rewriteTree(root *nodes.Template) {
	w := &rewriter{seen: map[uintptr]bool{}}
	w.walk(reflect.ValueOf(root))
}

type rewriter struct {
	seen map[uintptr]bool // pointers already walked: the tree may share nodes
}

// walk visits v and everything it reaches. Unexported fields are reached through
// unsafe so that the expressions inside gonja's statements (set, with, filter) are
// rewritten too; the tree is gonja's own data and nothing else holds it yet.
func (w *rewriter) walk(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() || v.Type() == tokenType {
			return
		}
		if w.seen[v.Pointer()] {
			return
		}
		w.seen[v.Pointer()] = true
		w.walk(v.Elem())
	case reflect.Interface:
		if v.IsNil() {
			return
		}
		elem := v.Elem()
		w.walk(elem)
		if !v.CanSet() || !v.Type().Implements(nodeType) && v.Type() != nodeType {
			return
		}
		if n, ok := elem.Interface().(nodes.Node); ok {
			if r := replacement(n); r != nil && reflect.TypeOf(r).AssignableTo(v.Type()) {
				v.Set(reflect.ValueOf(r))
			}
		}
	case reflect.Struct:
		if !v.CanAddr() {
			return
		}
		t := v.Type()
		for i := range v.NumField() {
			name := t.Field(i).Name
			if name == "target" || name == "Target" {
				continue // an assignment target is not evaluated as an expression
			}
			w.walk(reflectSettable(v.Field(i)))
		}
		if t == setType {
			guardSet(v)
		}
	case reflect.Slice:
		for i := range v.Len() {
			w.walk(v.Index(i))
		}
	case reflect.Map:
		if !v.CanSet() {
			return
		}
		for _, k := range v.MapKeys() {
			tmp := reflect.New(v.Type().Elem()).Elem()
			tmp.Set(v.MapIndex(k))
			w.walk(tmp)
			v.SetMapIndex(k, tmp)
		}
	}
}

// reflectSettable returns f, made settable if it is an unexported field of an
// addressable struct.
func reflectSettable(f reflect.Value) reflect.Value {
	if f.CanSet() || !f.CanAddr() {
		return f
	}
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}

// replacement returns the node that replaces n, or nil to keep it.
func replacement(n nodes.Node) nodes.Node {
	switch x := n.(type) {
	case *nodes.GetItem:
		if x.Arg == nil {
			return nil
		}
		return call(fnGetItem, x.Location, x.Node, x.Arg)
	case *nodes.BinaryExpression:
		if x.Operator == nil || x.Operator.Token == nil {
			return nil
		}
		switch x.Operator.Token.Val {
		case "*":
			return call(fnMul, x.Operator.Token, x.Left, x.Right)
		case "**":
			return call(fnPow, x.Operator.Token, x.Left, x.Right)
		case "+":
			return call(fnAdd, x.Operator.Token, x.Left, x.Right)
		case "~":
			return call(fnConcat, x.Operator.Token, x.Left, x.Right)
		}
	}
	return nil
}

func call(fn string, at *tokens.Token, args ...nodes.Node) *nodes.Call {
	if at == nil {
		at = &tokens.Token{}
	}
	name := &tokens.Token{Type: tokens.Name, Val: fn, Pos: at.Pos, Line: at.Line, Col: at.Col}
	c := &nodes.Call{Location: at, Func: &nodes.Name{Name: name}, Kwargs: map[string]nodes.Expression{}}
	for _, a := range args {
		c.Args = append(c.Args, a)
	}
	return c
}

func argErr(fn string) *exec.Value {
	return exec.AsValue(fmt.Errorf("%w: bad operands of %s", ErrRender, strings.TrimPrefix(fn, "\x00")))
}

// getItem is x[i] with Python's semantics for negative indices and strings.
func getItem(_ *exec.Evaluator, va *exec.VarArgs) *exec.Value {
	if len(va.Args) != 2 {
		return argErr(fnGetItem)
	}
	obj, arg := va.Args[0], va.Args[1]
	if obj.IsError() {
		return obj
	}
	if arg.IsError() {
		return arg
	}
	var key any
	switch {
	case arg.IsString():
		key = arg.String()
	case arg.IsInteger():
		i := arg.Integer()
		if obj.IsString() {
			s := obj.String()
			n := utf8.RuneCountInString(s)
			if i < 0 {
				i += n
			}
			if i < 0 || i >= n {
				return exec.AsValue(nil)
			}
			for _, r := range s {
				if i == 0 {
					return exec.AsValue(string(r))
				}
				i--
			}
		}
		if i < 0 && obj.IsList() {
			i += obj.Len()
			if i < 0 {
				return exec.AsValue(nil)
			}
		}
		key = i
	case arg.IsNil():
		return exec.AsValue(nil)
	default:
		return exec.AsValue(fmt.Errorf("%w: index %s is not a string or an integer", ErrRender, arg.String()))
	}
	item, found := obj.GetItem(key)
	if !found && arg.IsString() {
		item, found = obj.GetAttribute(arg.String())
	}
	if !found {
		if item != nil && item.IsError() {
			return item
		}
		return exec.AsValue(nil)
	}
	return item
}

// mul is a * b, with repetition of strings and lists bounded by maxValueBytes.
func mul(_ *exec.Evaluator, va *exec.VarArgs) *exec.Value {
	if len(va.Args) != 2 {
		return argErr(fnMul)
	}
	a, b := va.Args[0], va.Args[1]
	if a.IsError() {
		return a
	}
	if b.IsError() {
		return b
	}
	if a.IsInteger() && (b.IsString() || b.IsList()) {
		a, b = b, a
	}
	switch {
	case a.IsString() && b.IsInteger():
		n := max(b.Integer(), 0)
		s := a.String()
		if n > 0 && len(s) > maxValueBytes/n {
			return exec.AsValue(raise(fmt.Errorf("%w: string repetition beyond %d bytes", ErrTooLarge, maxValueBytes)))
		}
		return exec.AsValue(strings.Repeat(s, n))
	case a.IsList() && b.IsInteger():
		n := max(b.Integer(), 0)
		l := a.Len()
		if n > 0 && (l > MaxRange/n || listBytes(a, maxValueBytes) > maxValueBytes/n) {
			return exec.AsValue(raise(fmt.Errorf("%w: list repetition beyond %d items or %d bytes", ErrTooLarge, MaxRange, maxValueBytes)))
		}
		out := make([]any, 0, l*n)
		for range n {
			for i := range l {
				out = append(out, a.Index(i).Interface())
			}
		}
		return exec.AsValue(out)
	case a.IsFloat() && b.IsNumber() || a.IsNumber() && b.IsFloat():
		return exec.AsValue(a.Float() * b.Float())
	case a.IsInteger() && b.IsInteger():
		return exec.AsValue(a.Integer() * b.Integer())
	}
	return argErr(fnMul)
}

// pow is a ** b: an integer for integers with a non-negative exponent, as in Python.
func pow(_ *exec.Evaluator, va *exec.VarArgs) *exec.Value {
	if len(va.Args) != 2 {
		return argErr(fnPow)
	}
	a, b := va.Args[0], va.Args[1]
	if a.IsError() {
		return a
	}
	if b.IsError() {
		return b
	}
	if !a.IsNumber() || !b.IsNumber() {
		return argErr(fnPow)
	}
	if a.IsInteger() && b.IsInteger() && b.Integer() >= 0 {
		base, exp := a.Integer(), b.Integer()
		switch {
		case base == 0 || base == 1:
			if exp == 0 {
				return exec.AsValue(1)
			}
			return exec.AsValue(base)
		case base == -1:
			return exec.AsValue(1 - 2*(exp%2))
		}
		// |base| >= 2: below 2^62 the exponent is at most 61.
		if f := math.Pow(float64(base), float64(exp)); math.Abs(f) >= 1<<62 {
			return exec.AsValue(f)
		}
		r := 1
		for range exp {
			r *= base
		}
		return exec.AsValue(r)
	}
	return exec.AsValue(math.Pow(a.Float(), b.Float()))
}

func tooLarge(what string) *exec.Value {
	return exec.AsValue(raise(fmt.Errorf("%w: %s beyond %d bytes", ErrTooLarge, what, maxValueBytes)))
}

// add is a + b as gonja computes it (lists concatenate, a string on either side
// concatenates strings), bounded.
func add(_ *exec.Evaluator, va *exec.VarArgs) *exec.Value {
	if len(va.Args) != 2 {
		return argErr(fnAdd)
	}
	a, b := va.Args[0], va.Args[1]
	if a.IsError() {
		return a
	}
	if b.IsError() {
		return b
	}
	switch {
	case a.IsList():
		if !b.IsList() {
			return argErr(fnAdd)
		}
		if a.Len()+b.Len() > MaxRange || listBytes(a, maxValueBytes)+listBytes(b, maxValueBytes) > maxValueBytes {
			return exec.AsValue(raise(fmt.Errorf("%w: list beyond %d items", ErrTooLarge, MaxRange)))
		}
		out := make([]any, 0, a.Len()+b.Len())
		for _, l := range []*exec.Value{a, b} {
			for i := range l.Len() {
				out = append(out, l.Index(i).Interface())
			}
		}
		return exec.AsValue(out)
	case a.IsFloat() || b.IsFloat():
		return exec.AsValue(a.Float() + b.Float())
	case a.IsString() || b.IsString():
		return concatValues(a, b)
	}
	return exec.AsValue(a.Integer() + b.Integer())
}

// concat is a ~ b, bounded.
func concat(_ *exec.Evaluator, va *exec.VarArgs) *exec.Value {
	if len(va.Args) != 2 {
		return argErr(fnConcat)
	}
	if va.Args[0].IsError() {
		return va.Args[0]
	}
	if va.Args[1].IsError() {
		return va.Args[1]
	}
	return concatValues(va.Args[0], va.Args[1])
}

func concatValues(a, b *exec.Value) *exec.Value {
	sa, sb := a.String(), b.String()
	if len(sa)+len(sb) > maxValueBytes {
		return tooLarge("string")
	}
	out := exec.AsValue(sa + sb)
	out.Safe = a.Safe && b.Safe
	return out
}

// tick takes a step from the render's budget and returns its argument: it guards
// the condition of a filtered for loop, whose skipped items run no body.
func tick(e *exec.Evaluator, va *exec.VarArgs) *exec.Value {
	if b := budgetOf(e.Environment.Context); b != nil {
		if err := b.step(); err != nil {
			return exec.AsValue(err)
		}
	}
	if len(va.Args) != 1 {
		return argErr(fnTick)
	}
	return va.Args[0]
}
