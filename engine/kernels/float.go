package kernels

import (
	"math"

	"github.com/x448/float16"
)

// Half-precision conversions. github.com/x448/float16 does the IEEE 754 binary16
// conversions (round to nearest even, NaN and subnormal handling as the F16C
// instructions that ggml uses); f16Table caches its f16→f32 results because the
// kernels convert billions of values. bfloat16 is the top half of a float32 and needs
// no library.

// f16Table maps each binary16 bit pattern to its float32 value.
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = float16.Frombits(uint16(i)).Float32()
	}
	return &t
}()

// F16ToF32 converts binary16 bits to float32 (exact).
func F16ToF32(h uint16) float32 { return f16Table[h] }

// F32sToF16s sets dst[i] = F32ToF16(src[i]) for every i < len(src), 8 at a time
// with F16C where the CPU has it.
func F32sToF16s(dst []uint16, src []float32) {
	_ = dst[:len(src)]
	toF16s(dst, src)
}

// F32ToF16 converts f to binary16 bits, rounding to nearest even.
func F32ToF16(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

// RoundF16 returns f rounded to the nearest binary16 value.
func RoundF16(f float32) float32 { return f16Table[F32ToF16(f)] }

// BF16ToF32 converts bfloat16 bits to float32 (exact).
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 converts f to bfloat16 bits, rounding to nearest even as ggml does (NaNs
// stay quiet NaNs).
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN
		return uint16(u>>16) | 64
	}
	return uint16((u + (0x7fff + (u>>16)&1)) >> 16)
}

// RoundBF16 returns f rounded to the nearest bfloat16 value.
func RoundBF16(f float32) float32 { return BF16ToF32(F32ToBF16(f)) }

func le16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }

func put16(b []byte, v uint16) { b[0], b[1] = byte(v), byte(v>>8) }

// nearestInt rounds to the nearest integer, ties to even, as ggml's nearest_int:
// adding 1.5·2^23 leaves the rounded integer in the low mantissa bits. Valid for
// |f| < 2^22, which quantizer inputs (scaled to a few hundred at most) are; larger
// values fall back to the general rounding.
func nearestInt(f float32) int {
	if !(f < 1<<22 && f > -(1<<22)) {
		return int(math.RoundToEven(float64(f)))
	}
	return int(math.Float32bits(f+12582912)&0x7fffff) - 0x400000
}
