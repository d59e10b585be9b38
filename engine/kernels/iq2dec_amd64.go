//go:build !purego

package kernels

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// The lattice types' AVX-512 decoding kernels (_asm/iq2dec512.go): one token
// against many rows in one call, each row's result the AVX2 row kernel's bits.
// IQ2_XS and IQ2_XXS need VBMI and BITALG besides (VPERMB, VPMULTISHIFTQB,
// VPOPCNTW/B, VPSHUFBITQMB),
// IQ1_M BMI2 (PDEP).
var hasBITALG = cpu.X86.HasAVX512BITALG

// latticeDecKernel returns typ's many-row decoding kernel, or nil where this
// CPU (or the level the tests set) has none.
func latticeDecKernel(typ Type) func(x *byte, rb int, y *byte, n, rows int, out *float32, grid *byte) {
	switch {
	case typ == IQ2_S && useAVX512:
		return dotIQ2SAVX512r
	case typ == IQ2_XS && useVNNI16 && hasBITALG:
		return dotIQ2XSAVX512r
	case typ == IQ2_XXS && useVNNI16 && hasBITALG:
		return dotIQ2XXSAVX512r
	case typ == IQ1_M && useAVX512 && cpu.X86.HasBMI2:
		return dotIQ1MAVX512r
	}
	return nil
}

// latticeGrid returns the address of typ's grid.
func latticeGrid(typ Type) *byte {
	switch typ {
	case IQ2_XXS:
		return (*byte)(unsafe.Pointer(&iq2xxsGrid[0]))
	case IQ2_XS:
		return (*byte)(unsafe.Pointer(&iq2xsGrid[0]))
	case IQ2_S:
		return (*byte)(unsafe.Pointer(&iq2sGrid[0]))
	case IQ1_M:
		return (*byte)(unsafe.Pointer(&iq1sGrid[0]))
	}
	panic("kernels: no grid for " + typ.String())
}

// latticeDecRows is fastRows for the types of latticeDecKernel: rows [lo, hi)
// against the one token in one call. It returns the first row it left (lo
// where it has no kernel).
func (m *matMul) latticeDecRows(lo, hi int) int {
	k := latticeDecKernel(m.w.Type)
	nb := m.a.cols / qkK
	if k == nil || nb == 0 || hi <= lo {
		return lo
	}
	_ = m.a.q8k[nb-1]
	_ = m.w.Data[hi*m.rb-1]
	_ = m.dst[hi-1]
	k(&m.w.Data[lo*m.rb], m.rb, (*byte)(unsafe.Pointer(&m.a.q8k[0])), nb, hi-lo, &m.dst[lo], latticeGrid(m.w.Type))
	return hi
}

// latticeDecRow returns the dot of one row of typ with y through typ's
// decoding kernel; ok is false where there is none. The kernels are called
// directly, not through latticeDecKernel's func value: through it v would
// escape and every row would allocate (TestKernelsDoNotAllocate).
func latticeDecRow(typ Type, row []byte, y []q8KBlock) (v float32, ok bool) {
	n := len(y)
	if latticeDecKernel(typ) == nil || n == 0 {
		return 0, false
	}
	_ = row[n*typ.BlockBytes()-1]
	x, yb, grid := &row[0], (*byte)(unsafe.Pointer(&y[0])), latticeGrid(typ)
	switch typ {
	case IQ2_S:
		dotIQ2SAVX512r(x, 0, yb, n, 1, &v, grid)
	case IQ2_XS:
		dotIQ2XSAVX512r(x, 0, yb, n, 1, &v, grid)
	case IQ2_XXS:
		dotIQ2XXSAVX512r(x, 0, yb, n, 1, &v, grid)
	case IQ1_M:
		dotIQ1MAVX512r(x, 0, yb, n, 1, &v, grid)
	default:
		return 0, false
	}
	return v, true
}
