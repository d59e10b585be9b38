package gguf

import (
	"fmt"
	"math"
)

// ValueType is the type of a metadata value, numbered as the GGUF specification does.
type ValueType uint32

const (
	TypeUint8 ValueType = iota
	TypeInt8
	TypeUint16
	TypeInt16
	TypeUint32
	TypeInt32
	TypeFloat32
	TypeBool
	TypeString
	TypeArray
	TypeUint64
	TypeInt64
	TypeFloat64
	typeCount
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32",
	"float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if t < typeCount {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("ValueType(%d)", uint32(t))
}

// scalarSize is the encoded size of a fixed-size scalar type, 0 for string and array.
func (t ValueType) scalarSize() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// GGMLType is a tensor's element type, numbered as ggml does.
type GGMLType uint32

const (
	F32     GGMLType = 0
	F16     GGMLType = 1
	Q4_0    GGMLType = 2
	Q4_1    GGMLType = 3
	Q5_0    GGMLType = 6
	Q5_1    GGMLType = 7
	Q8_0    GGMLType = 8
	Q8_1    GGMLType = 9
	Q2_K    GGMLType = 10
	Q3_K    GGMLType = 11
	Q4_K    GGMLType = 12
	Q5_K    GGMLType = 13
	Q6_K    GGMLType = 14
	Q8_K    GGMLType = 15
	IQ2_XXS GGMLType = 16
	IQ2_XS  GGMLType = 17
	IQ3_XXS GGMLType = 18
	IQ1_S   GGMLType = 19
	IQ4_NL  GGMLType = 20
	IQ3_S   GGMLType = 21
	IQ2_S   GGMLType = 22
	IQ4_XS  GGMLType = 23
	I8      GGMLType = 24
	I16     GGMLType = 25
	I32     GGMLType = 26
	I64     GGMLType = 27
	F64     GGMLType = 28
	IQ1_M   GGMLType = 29
	BF16    GGMLType = 30
	TQ1_0   GGMLType = 34
	TQ2_0   GGMLType = 35
	MXFP4   GGMLType = 39
)

type typeTraits struct {
	name       string
	blockSize  int // elements per block
	blockBytes int // bytes per block
}

var ggmlTypes = map[GGMLType]typeTraits{
	F32: {"F32", 1, 4}, F16: {"F16", 1, 2}, BF16: {"BF16", 1, 2}, F64: {"F64", 1, 8},
	I8: {"I8", 1, 1}, I16: {"I16", 1, 2}, I32: {"I32", 1, 4}, I64: {"I64", 1, 8},
	Q4_0: {"Q4_0", 32, 18}, Q4_1: {"Q4_1", 32, 20}, Q5_0: {"Q5_0", 32, 22}, Q5_1: {"Q5_1", 32, 24},
	Q8_0: {"Q8_0", 32, 34}, Q8_1: {"Q8_1", 32, 36},
	Q2_K: {"Q2_K", 256, 84}, Q3_K: {"Q3_K", 256, 110}, Q4_K: {"Q4_K", 256, 144},
	Q5_K: {"Q5_K", 256, 176}, Q6_K: {"Q6_K", 256, 210}, Q8_K: {"Q8_K", 256, 292},
	IQ2_XXS: {"IQ2_XXS", 256, 66}, IQ2_XS: {"IQ2_XS", 256, 74}, IQ3_XXS: {"IQ3_XXS", 256, 98},
	IQ1_S: {"IQ1_S", 256, 50}, IQ4_NL: {"IQ4_NL", 32, 18}, IQ3_S: {"IQ3_S", 256, 110},
	IQ2_S: {"IQ2_S", 256, 82}, IQ4_XS: {"IQ4_XS", 256, 136}, IQ1_M: {"IQ1_M", 256, 56},
	TQ1_0: {"TQ1_0", 256, 54}, TQ2_0: {"TQ2_0", 256, 66}, MXFP4: {"MXFP4", 32, 17},
}

// Known reports whether the type's layout is known (its sizes can be computed).
func (t GGMLType) Known() bool { _, ok := ggmlTypes[t]; return ok }

func (t GGMLType) String() string {
	if tr, ok := ggmlTypes[t]; ok {
		return tr.name
	}
	return fmt.Sprintf("GGMLType(%d)", uint32(t))
}

// BlockSize is the number of elements in one block (1 for plain float and integer types).
func (t GGMLType) BlockSize() int { return ggmlTypes[t].blockSize }

// BlockBytes is the encoded size of one block.
func (t GGMLType) BlockBytes() int { return ggmlTypes[t].blockBytes }

// RowBytes is the encoded size of a row of n elements.
func (t GGMLType) RowBytes(n int) (int, error) {
	tr, ok := ggmlTypes[t]
	if !ok {
		return 0, fmt.Errorf("gguf: unknown tensor type %d", uint32(t))
	}
	if n < 0 || n%tr.blockSize != 0 {
		return 0, fmt.Errorf("gguf: row of %d elements is not a multiple of %s's block size %d", n, tr.name, tr.blockSize)
	}
	return n / tr.blockSize * tr.blockBytes, nil
}

// tensorBytes computes the size of a tensor of the given dims, rejecting overflow.
func tensorBytes(t GGMLType, dims []uint64) (int64, error) {
	tr, ok := ggmlTypes[t]
	if !ok {
		return 0, fmt.Errorf("unknown tensor type %d", uint32(t))
	}
	if len(dims) == 0 {
		return 0, fmt.Errorf("no dimensions")
	}
	if dims[0]%uint64(tr.blockSize) != 0 {
		return 0, fmt.Errorf("row length %d is not a multiple of %s's block size %d", dims[0], tr.name, tr.blockSize)
	}
	total := dims[0] / uint64(tr.blockSize) * uint64(tr.blockBytes)
	for _, d := range dims[1:] {
		if d != 0 && total > math.MaxInt64/d {
			return 0, fmt.Errorf("size overflows")
		}
		total *= d
	}
	if total > math.MaxInt64 {
		return 0, fmt.Errorf("size overflows")
	}
	return int64(total), nil
}
