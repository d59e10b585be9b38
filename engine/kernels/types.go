package kernels

import "fmt"

// Type is a tensor element type, numbered as ggml numbers them (the GGUF tensor type
// field), so that a GGUF tensor's type converts directly: kernels.Type(info.Type).
type Type uint32

// The types the kernels implement. Q8_1 and Q8_K exist only as activation formats
// (of the Q4_1/Q5_1 and the K-quant, IQ4_XS and ternary dot products); weights never
// use them.
const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	IQ1_M   Type = 29
	BF16    Type = 30
	TQ1_0   Type = 34
	TQ2_0   Type = 35
)

// Block geometry of the ggml formats.
const (
	qk0 = 32  // elements per Q8_0 / Q4_0 block
	qkK = 256 // elements per K-quant super-block
)

// typeInfo is ggml's name, block size and block bytes of each type, and whether it
// can be a weight type.
type typeInfo struct {
	name       string
	size, nb   int
	weightType bool
}

var types = [...]typeInfo{
	F32:    {"F32", 1, 4, true},
	F16:    {"F16", 1, 2, true},
	BF16:   {"BF16", 1, 2, true},
	Q4_0:   {"Q4_0", qk0, 2 + qk0/2, true},          // d, 32 nibbles
	Q4_1:   {"Q4_1", qk0, 4 + qk0/2, true},          // d, m, 32 nibbles
	Q5_0:   {"Q5_0", qk0, 2 + 4 + qk0/2, true},      // d, 32 high bits, 32 nibbles
	Q5_1:   {"Q5_1", qk0, 4 + 4 + qk0/2, true},      // d, m, 32 high bits, 32 nibbles
	Q8_0:   {"Q8_0", qk0, 2 + qk0, true},            // d, 32 int8
	Q8_1:   {"Q8_1", qk0, 4 + qk0, false},           // d, s = d·Σq, 32 int8
	IQ4_NL: {"IQ4_NL", qk0, 2 + qk0/2, true},        // d, 32 nibbles indexing a 16-value table
	Q2_K:   {"Q2_K", qkK, qkK/16 + qkK/4 + 4, true}, // 16 4-bit scales and mins, 2-bit quants, d, dmin
	Q3_K:   {"Q3_K", qkK, qkK/8 + qkK/4 + 12 + 2, true},
	Q4_K:   {"Q4_K", qkK, 2 + 2 + 12 + qkK/2, true}, // d, dmin, 8 6-bit scales and mins, 256 nibbles
	Q5_K:   {"Q5_K", qkK, 2 + 2 + 12 + qkK/8 + qkK/2, true},
	Q6_K:   {"Q6_K", qkK, qkK/2 + qkK/4 + qkK/16 + 2, true}, // ql, qh, int8 scales, d
	Q8_K:   {"Q8_K", qkK, 4 + qkK + qkK/16*2, false},        // float32 d, int8 qs, int16 bsums
	IQ4_XS: {"IQ4_XS", qkK, 2 + 2 + qkK/64 + qkK/2, true},   // d, high and low scale bits, nibbles
	TQ1_0:  {"TQ1_0", qkK, (qkK-4*qkK/64)/5 + qkK/64 + 2, true},
	TQ2_0:  {"TQ2_0", qkK, qkK/4 + 2, true},
	// The lattice types (iquants.go).
	IQ2_XXS: {"IQ2_XXS", qkK, 2 + qkK/4, true},                    // d, 8 bytes per 32
	IQ2_XS:  {"IQ2_XS", qkK, 2 + qkK/4 + qkK/32, true},            // d, 16-bit indices, scales
	IQ2_S:   {"IQ2_S", qkK, 2 + qkK/4 + qkK/32 + qkK/32, true},    // d, indices and signs, high bits, scales
	IQ3_XXS: {"IQ3_XXS", qkK, 2 + 3*qkK/8, true},                  // d, indices, signs and scales
	IQ3_S:   {"IQ3_S", qkK, 2 + qkK/4 + qkK/32 + qkK/8 + 4, true}, // d, indices, high bits, signs, scales
	IQ1_S:   {"IQ1_S", qkK, 2 + qkK/8 + qkK/16, true},             // d, indices, high bits and scales
	IQ1_M:   {"IQ1_M", qkK, qkK/8 + qkK/16 + qkK/32, true},        // indices, high bits, scales with d
}

func (t Type) info() typeInfo {
	if int(t) < len(types) {
		return types[t]
	}
	return typeInfo{}
}

// String returns ggml's name of the type.
func (t Type) String() string {
	if n := t.info().name; n != "" {
		return n
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Supported reports whether t can be a weight type of MatMul and DequantizeRow.
func Supported(t Type) bool { return t.info().weightType }

// SupportedTypes lists the weight types, in ggml's numbering.
func SupportedTypes() []Type {
	var ts []Type
	for i, ti := range types {
		if ti.weightType {
			ts = append(ts, Type(i))
		}
	}
	return ts
}

// BlockSize is the number of elements in one block of t (1 for the float types).
func (t Type) BlockSize() int {
	if s := t.info().size; s > 0 {
		return s
	}
	return 1
}

// BlockBytes is the size of one block of t in bytes.
func (t Type) BlockBytes() int { return t.info().nb }

// RowBytes is the size in bytes of a row of n elements of t. It panics if n is not a
// multiple of the block size (callers check shapes once, at load).
func (t Type) RowBytes(n int) int {
	bs := t.BlockSize()
	if n%bs != 0 || t.BlockBytes() == 0 {
		panic(fmt.Sprintf("kernels: row of %d elements of %v", n, t))
	}
	return n / bs * t.BlockBytes()
}

// ValidRow reports whether a row of n elements of t is representable (n a positive
// multiple of the block size of a supported type).
func ValidRow(t Type, n int) bool {
	return Supported(t) && n > 0 && n%t.BlockSize() == 0
}

// Matrix is a read-only view of a weight matrix as ggml stores it: Rows rows of Cols
// elements each, row-major, every row encoded in Type (Data may be memory-mapped).
type Matrix struct {
	Type       Type
	Rows, Cols int
	Data       []byte
	// Packed is how many leading rows (whole groups of 16) PackQ4K put in the
	// packed Q4_K layout of its kernels (q4krepack.go); 0 for a plain matrix.
	Packed int
}

// Row returns the encoded bytes of row i.
func (m Matrix) Row(i int) []byte {
	rb := m.Type.RowBytes(m.Cols)
	return m.Data[i*rb : (i+1)*rb]
}

// Check reports whether the view is consistent: a supported type, a valid row length
// and exactly enough data.
func (m Matrix) Check() error {
	if !Supported(m.Type) {
		return fmt.Errorf("kernels: unsupported tensor type %v", m.Type)
	}
	if m.Rows <= 0 || !ValidRow(m.Type, m.Cols) {
		return fmt.Errorf("kernels: bad %v matrix shape %dx%d", m.Type, m.Rows, m.Cols)
	}
	if want := m.Rows * m.Type.RowBytes(m.Cols); len(m.Data) != want {
		return fmt.Errorf("kernels: %v matrix %dx%d has %d bytes, want %d", m.Type, m.Rows, m.Cols, len(m.Data), want)
	}
	return nil
}
