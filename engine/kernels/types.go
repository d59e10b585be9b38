package kernels

import "fmt"

// Type is a tensor element type, numbered as ggml numbers them (the GGUF tensor type
// field), so that a GGUF tensor's type converts directly: kernels.Type(info.Type).
type Type uint32

// The types the kernels implement. Q8_K exists only as the activation format of the
// K-quant dot products; weights never use it.
const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q8_0 Type = 8
	Q4_K Type = 12
	Q6_K Type = 14
	Q8_K Type = 15
	BF16 Type = 30
)

// Block geometry of the ggml formats.
const (
	qk0 = 32  // elements per Q8_0 / Q4_0 block
	qkK = 256 // elements per K-quant super-block
)

// String returns ggml's name of the type.
func (t Type) String() string {
	switch t {
	case F32:
		return "F32"
	case F16:
		return "F16"
	case BF16:
		return "BF16"
	case Q4_0:
		return "Q4_0"
	case Q8_0:
		return "Q8_0"
	case Q4_K:
		return "Q4_K"
	case Q6_K:
		return "Q6_K"
	case Q8_K:
		return "Q8_K"
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Supported reports whether t can be a weight type of MatMul and DequantizeRow.
func Supported(t Type) bool {
	switch t {
	case F32, F16, BF16, Q4_0, Q8_0, Q4_K, Q6_K:
		return true
	}
	return false
}

// BlockSize is the number of elements in one block of t (1 for the float types).
func (t Type) BlockSize() int {
	switch t {
	case Q4_0, Q8_0:
		return qk0
	case Q4_K, Q6_K, Q8_K:
		return qkK
	}
	return 1
}

// BlockBytes is the size of one block of t in bytes.
func (t Type) BlockBytes() int {
	switch t {
	case F32:
		return 4
	case F16, BF16:
		return 2
	case Q4_0:
		return 2 + qk0/2 // d, 32 nibbles
	case Q8_0:
		return 2 + qk0 // d, 32 int8
	case Q4_K:
		return 2 + 2 + 12 + qkK/2 // d, dmin, 8 6-bit scales and mins, 256 nibbles
	case Q6_K:
		return qkK/2 + qkK/4 + qkK/16 + 2 // ql, qh, int8 scales, d
	case Q8_K:
		return 4 + qkK + qkK/16*2 // float32 d, int8 qs, int16 bsums
	}
	return 0
}

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
