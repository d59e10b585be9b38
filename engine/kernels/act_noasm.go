//go:build !amd64 || purego

package kernels

func quantRowsQ8_0(y []q8Block, x []float32, shift int) { quantRowsQ8_0Generic(y, x, shift) }
func quantRowsQ8K(y []q8KBlock, x []float32)            { quantRowsQ8KGeneric(y, x) }
func roundF16s(dst, src []float32)                      { roundF16sGeneric(dst, src) }
func roundBF16s(dst, src []float32)                     { roundBF16sGeneric(dst, src) }
func swiglu(dst, gate, up []float32)                    { swigluGeneric(dst, gate, up) }
func toF16s(dst []uint16, src []float32)                { toF16sGeneric(dst, src) }
