package gguf

import "math"

// Value is one metadata value: a scalar, or an array. Arrays of scalars are kept as
// typed Go slices (a 150,000-entry vocabulary is one []string, not 150,000 Values);
// arrays of arrays as []Value. The zero Value is an invalid uint8 and reads as nothing.
type Value struct {
	typ  ValueType
	elem ValueType // element type of an array
	x    any       // uint8 ... float64, bool, string; []T for scalar arrays; []Value for nested arrays
}

// Type is the value's type.
func (v Value) Type() ValueType { return v.typ }

// ElemType is the element type of an array value.
func (v Value) ElemType() ValueType { return v.elem }

// Len is the length of an array value, 0 for scalars.
func (v Value) Len() int {
	switch a := v.x.(type) {
	case []uint8:
		return len(a)
	case []int8:
		return len(a)
	case []uint16:
		return len(a)
	case []int16:
		return len(a)
	case []uint32:
		return len(a)
	case []int32:
		return len(a)
	case []float32:
		return len(a)
	case []bool:
		return len(a)
	case []string:
		return len(a)
	case []uint64:
		return len(a)
	case []int64:
		return len(a)
	case []float64:
		return len(a)
	case []Value:
		return len(a)
	}
	return 0
}

// Any returns the value as a plain Go value (for printing).
func (v Value) Any() any { return v.x }

// String returns a string value.
func (v Value) String() (string, bool) { s, ok := v.x.(string); return s, ok }

// Bool returns a bool value.
func (v Value) Bool() (bool, bool) { b, ok := v.x.(bool); return b, ok }

// Int returns an integer value of any integer type (uint64 above MaxInt64 fails).
func (v Value) Int() (int64, bool) {
	switch x := v.x.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

// Uint returns a non-negative integer value of any integer type.
func (v Value) Uint() (uint64, bool) {
	if u, ok := v.x.(uint64); ok {
		return u, true
	}
	i, ok := v.Int()
	if !ok || i < 0 {
		return 0, false
	}
	return uint64(i), true
}

// Float returns a floating-point value; integers convert too.
func (v Value) Float() (float64, bool) {
	switch x := v.x.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	if i, ok := v.Int(); ok {
		return float64(i), true
	}
	if u, ok := v.x.(uint64); ok {
		return float64(u), true
	}
	return 0, false
}

// Strings returns an array of strings.
func (v Value) Strings() ([]string, bool) { s, ok := v.x.([]string); return s, ok }

// Float32s returns an array of float32 (float64 arrays are converted).
func (v Value) Float32s() ([]float32, bool) {
	switch a := v.x.(type) {
	case []float32:
		return a, true
	case []float64:
		out := make([]float32, len(a))
		for i, f := range a {
			out[i] = float32(f)
		}
		return out, true
	}
	return nil, false
}

// Int32s returns an array of any integer type converted to int32. Values that do not
// fit make it fail.
func (v Value) Int32s() ([]int32, bool) {
	if a, ok := v.x.([]int32); ok {
		return a, true
	}
	if v.typ != TypeArray {
		return nil, false
	}
	out := make([]int32, 0, v.Len())
	add := func(x int64) bool {
		if x < math.MinInt32 || x > math.MaxInt32 {
			return false
		}
		out = append(out, int32(x))
		return true
	}
	ok := true
	switch a := v.x.(type) {
	case []uint8:
		for _, x := range a {
			ok = ok && add(int64(x))
		}
	case []int8:
		for _, x := range a {
			ok = ok && add(int64(x))
		}
	case []uint16:
		for _, x := range a {
			ok = ok && add(int64(x))
		}
	case []int16:
		for _, x := range a {
			ok = ok && add(int64(x))
		}
	case []uint32:
		for _, x := range a {
			ok = ok && add(int64(x))
		}
	case []uint64:
		for _, x := range a {
			ok = ok && x <= math.MaxInt32 && add(int64(x))
		}
	case []int64:
		for _, x := range a {
			ok = ok && add(x)
		}
	default:
		return nil, false
	}
	return out, ok
}

// Array returns any array element by element.
func (v Value) Array() ([]Value, bool) {
	if a, ok := v.x.([]Value); ok {
		return a, true
	}
	if v.typ != TypeArray {
		return nil, false
	}
	n := v.Len()
	out := make([]Value, n)
	for i := range n {
		out[i] = v.index(i)
	}
	return out, true
}

func (v Value) index(i int) Value {
	switch a := v.x.(type) {
	case []uint8:
		return Uint8(a[i])
	case []int8:
		return Int8(a[i])
	case []uint16:
		return Uint16(a[i])
	case []int16:
		return Int16(a[i])
	case []uint32:
		return Uint32(a[i])
	case []int32:
		return Int32(a[i])
	case []float32:
		return Float32(a[i])
	case []bool:
		return Bool(a[i])
	case []string:
		return String(a[i])
	case []uint64:
		return Uint64(a[i])
	case []int64:
		return Int64(a[i])
	case []float64:
		return Float64(a[i])
	case []Value:
		return a[i]
	}
	return Value{}
}

// Constructors, one per type.

func Uint8(x uint8) Value     { return Value{typ: TypeUint8, x: x} }
func Int8(x int8) Value       { return Value{typ: TypeInt8, x: x} }
func Uint16(x uint16) Value   { return Value{typ: TypeUint16, x: x} }
func Int16(x int16) Value     { return Value{typ: TypeInt16, x: x} }
func Uint32(x uint32) Value   { return Value{typ: TypeUint32, x: x} }
func Int32(x int32) Value     { return Value{typ: TypeInt32, x: x} }
func Float32(x float32) Value { return Value{typ: TypeFloat32, x: x} }
func Bool(x bool) Value       { return Value{typ: TypeBool, x: x} }
func String(x string) Value   { return Value{typ: TypeString, x: x} }
func Uint64(x uint64) Value   { return Value{typ: TypeUint64, x: x} }
func Int64(x int64) Value     { return Value{typ: TypeInt64, x: x} }
func Float64(x float64) Value { return Value{typ: TypeFloat64, x: x} }

func Strings(x []string) Value   { return Value{typ: TypeArray, elem: TypeString, x: x} }
func Float32s(x []float32) Value { return Value{typ: TypeArray, elem: TypeFloat32, x: x} }
func Int32s(x []int32) Value     { return Value{typ: TypeArray, elem: TypeInt32, x: x} }
func Uint32s(x []uint32) Value   { return Value{typ: TypeArray, elem: TypeUint32, x: x} }
func Uint64s(x []uint64) Value   { return Value{typ: TypeArray, elem: TypeUint64, x: x} }
func Bools(x []bool) Value       { return Value{typ: TypeArray, elem: TypeBool, x: x} }

// Array builds an array from values of one element type (nested arrays allowed).
// Scalar elements are packed into a typed slice.
func Array(elem ValueType, vals []Value) Value {
	if elem == TypeArray {
		return Value{typ: TypeArray, elem: TypeArray, x: vals}
	}
	var x any
	switch elem {
	case TypeUint8:
		x = packed[uint8](vals)
	case TypeInt8:
		x = packed[int8](vals)
	case TypeUint16:
		x = packed[uint16](vals)
	case TypeInt16:
		x = packed[int16](vals)
	case TypeUint32:
		x = packed[uint32](vals)
	case TypeInt32:
		x = packed[int32](vals)
	case TypeFloat32:
		x = packed[float32](vals)
	case TypeBool:
		x = packed[bool](vals)
	case TypeString:
		x = packed[string](vals)
	case TypeUint64:
		x = packed[uint64](vals)
	case TypeInt64:
		x = packed[int64](vals)
	case TypeFloat64:
		x = packed[float64](vals)
	default:
		panic("gguf: Array of invalid element type " + elem.String())
	}
	return Value{typ: TypeArray, elem: elem, x: x}
}

func packed[T any](vals []Value) []T {
	out := make([]T, len(vals))
	for i, v := range vals {
		t, ok := v.x.(T)
		if !ok {
			panic("gguf: Array element of the wrong type")
		}
		out[i] = t
	}
	return out
}
