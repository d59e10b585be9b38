package chat

import (
	"fmt"
	"reflect"

	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
)

// Templates can mutate maps with {% set ns.x = ... %} and {% set d[k] = ... %},
// and so could store a namespace inside itself (gonja's dict methods update and
// setdefault work on copies; TestHostile checks that they still do). gonja prints and
// compares values by recursion with no cycle check, so printing such a value would
// overflow the stack, which Go cannot recover from. Every such assignment is
// therefore checked first: the stored value must not reach the map, nor nest deeper
// than maxValueDepth.

const (
	fnNoCycle     = "\x00nocycle"
	maxValueDepth = 64
	maxValueNodes = 100_000
)

var setType = reflect.TypeFor[controlStructures.SetControlStructure]()

// guardSet wraps the value of an assignment to an attribute or item,
// {% set x.a = v %} or {% set x[k] = v %}, as nocycle(x, v). s is the addressable
// SetControlStructure; its fields are unexported (see rewriter.walk).
func guardSet(s reflect.Value) {
	field := func(name string) reflect.Value {
		f := s.FieldByName(name)
		if !f.IsValid() {
			return f
		}
		return reflectSettable(f)
	}
	target := field("target")
	if !target.IsValid() || target.IsNil() {
		return
	}
	var obj nodes.Node
	switch t := target.Interface().(type) {
	case *nodes.GetAttribute:
		obj = t.Node
	case *nodes.GetItem:
		obj = t.Node
	default:
		return
	}
	for _, name := range []string{"expression", "alternative"} {
		f := field(name)
		if !f.IsValid() || f.IsNil() {
			continue
		}
		expr, ok := f.Interface().(nodes.Node)
		if !ok {
			continue
		}
		c := call(fnNoCycle, expr.Position(), obj, expr)
		if reflect.TypeOf(c).AssignableTo(f.Type()) {
			f.Set(reflect.ValueOf(c))
		}
	}
}

// noCycle returns its second argument if storing it in the first makes no cycle.
func noCycle(_ *exec.Evaluator, va *exec.VarArgs) *exec.Value {
	if len(va.Args) != 2 {
		return argErr(fnNoCycle)
	}
	target, value := va.Args[0], va.Args[1]
	if value.IsError() {
		return value
	}
	if target.IsError() {
		return target
	}
	if err := checkStore(target.Interface(), value.Interface()); err != nil {
		return exec.AsValue(raise(err))
	}
	return value
}

// checkStore fails if v reaches the map target or nests too deep.
func checkStore(target, v any) error {
	t := reflect.ValueOf(target)
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Interface {
		if t.IsNil() {
			return nil
		}
		t = t.Elem()
	}
	var ptr uintptr
	if t.Kind() == reflect.Map {
		ptr = t.Pointer()
	}
	nodes := 0
	var walk func(v reflect.Value, depth int) error
	walk = func(v reflect.Value, depth int) error {
		nodes++
		if depth > maxValueDepth || nodes > maxValueNodes {
			return fmt.Errorf("%w: value nested deeper than %d", ErrTooLarge, maxValueDepth)
		}
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
			if v.IsNil() {
				return nil
			}
			switch x := v.Interface().(type) {
			case *exec.Value:
				v = reflect.ValueOf(x.Interface())
				continue
			case *exec.Dict:
				for _, p := range x.Pairs {
					if err := walk(reflect.ValueOf(p.Value), depth+1); err != nil {
						return err
					}
				}
				return nil
			}
			v = v.Elem()
		}
		switch v.Kind() {
		case reflect.Map:
			if ptr != 0 && v.Pointer() == ptr {
				return fmt.Errorf("%w: a value may not contain itself", ErrRender)
			}
			for it := v.MapRange(); it.Next(); {
				if err := walk(it.Value(), depth+1); err != nil {
					return err
				}
			}
		case reflect.Slice, reflect.Array:
			for i := range v.Len() {
				if err := walk(v.Index(i), depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(reflect.ValueOf(v), 0)
}
