package kernels

import (
	"errors"
	"fmt"
	"unsafe"
)

// KVType is how a KV cache stores its K (or V) rows: binary16, llama.cpp's default,
// or one of the block formats of its -ctk / -ctv options, whose blocks (32 values:
// a binary16 scale, then the quants) are ggml's Q8_0 and Q4_0 bit for bit. A row is
// stored in uint16 units (a Q8_0 block is 17 of them, a Q4_0 block 9), so that the
// cache keeps one arena type whatever it holds.
type KVType uint8

// The KV cache types.
const (
	KVF16 KVType = iota
	KVQ8_0
	KVQ4_0
)

// ErrKVType is the error of ParseKVType and CheckKVType, matched with errors.Is.
var ErrKVType = errors.New("kernels: bad KV cache type")

// KVTypeNames are the names ParseKVType takes, llama.cpp's.
var KVTypeNames = []string{"f16", "q8_0", "q4_0"}

// ParseKVType reads a KV cache type by llama.cpp's name; "" is f16.
func ParseKVType(s string) (KVType, error) {
	switch s {
	case "", "f16":
		return KVF16, nil
	case "q8_0":
		return KVQ8_0, nil
	case "q4_0":
		return KVQ4_0, nil
	}
	return 0, fmt.Errorf("%w %q (want one of %v)", ErrKVType, s, KVTypeNames)
}

func (t KVType) String() string {
	if int(t) < len(KVTypeNames) {
		return KVTypeNames[t]
	}
	return fmt.Sprintf("KVType(%d)", t)
}

// Quantized reports whether t is a block format.
func (t KVType) Quantized() bool { return t != KVF16 }

// Units is the number of uint16 units a row of n values takes (n a multiple of 32
// for the block formats).
func (t KVType) Units(n int) int {
	switch t {
	case KVQ8_0:
		return n / qk0 * 17
	case KVQ4_0:
		return n / qk0 * 9
	}
	return n
}

// CheckKVType reports whether rows of heads of hd values can be stored as t: the
// block formats need whole blocks per head, since attention reads one head's part
// of a row (llama.cpp's condition too).
func CheckKVType(t KVType, hd int) error {
	if t > KVQ4_0 {
		return fmt.Errorf("%w %d", ErrKVType, t)
	}
	if t.Quantized() && hd%qk0 != 0 {
		return fmt.Errorf("%w: %v needs a head size that is a multiple of %d, not %d", ErrKVType, t, qk0, hd)
	}
	return nil
}

// blockType is the weight type of t's block format.
func (t KVType) blockType() Type {
	if t == KVQ4_0 {
		return Q4_0
	}
	return Q8_0
}

// unitBytes views a row of uint16 units as its bytes (little-endian, as ggml's
// blocks are laid out in memory).
func unitBytes(u []uint16) []byte {
	if len(u) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&u[0])), 2*len(u))
}

// PutKVRow stores the values of src as one row of type t in dst (t.Units(len(src))
// units): binary16 by rounding each value, the block formats by ggml's quantizers as
// its CPU code runs them when it writes a KV cache row (quantize_row_q8_0's x86
// rounding, quantize_row_q4_0_ref).
func PutKVRow(dst []uint16, t KVType, src []float32) {
	switch t {
	case KVF16:
		F32sToF16s(dst[:len(src)], src)
	case KVQ8_0:
		b := unitBytes(dst[:t.Units(len(src))])
		for i := 0; i < len(src)/qk0; i++ {
			quantQ8_0(b[i*34:(i+1)*34], src[i*qk0:(i+1)*qk0])
		}
	case KVQ4_0:
		b := unitBytes(dst[:t.Units(len(src))])
		for i := 0; i < len(src)/qk0; i++ {
			quantQ4_0(b[i*18:(i+1)*18], src[i*qk0:(i+1)*qk0])
		}
	default:
		panic(fmt.Sprintf("kernels: PutKVRow of %v", t))
	}
}

// KVRow decodes a row of n values of type t (PutKVRow's) into dst.
func KVRow(dst []float32, t KVType, src []uint16) {
	if t == KVF16 {
		for i := range dst {
			dst[i] = f16Table[src[i]]
		}
		return
	}
	DequantizeRow(dst, t.blockType(), unitBytes(src[:t.Units(len(dst))]))
}
