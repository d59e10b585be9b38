//go:build !purego

package kernels

// f16RowsMinCols is the least number of columns for which one-token F16
// products take four rows a call (dotF16AVX512r4, float32 activations); fewer
// take one row a call with the activations as binary16 (dotF16AVX512r1h, as
// ggml_vec_dot_f16 has them). The float32 activations take 4·cols bytes of the
// core's 32 KiB L1 data cache, and as the weights stream by they are evicted
// before the next row comes back to them: one row a call with float32
// activations (dotF16AVX512) reads them again from L2 for every row.
// BenchmarkF16DecodeRows (Zen4, loaded, one thread, huge pages), cpu-GB/s of
// weights for one row a call with float32 activations, one with binary16, four
// with float32: 2048 columns 19–22, 30, 18; 4096 14–17, 27 (ratio 0.62), 17;
// 8192 (a 1b model's ffn_down) 10–12, 13–15, 18–20. Software prefetches
// (PREFETCHT0/T1/NTA, 0.5–8 KiB ahead) did not help.
const f16RowsMinCols = 4097

// packF16 fills a.h from a.f (one token's binary16-rounded activations) when
// f16Rows takes them through dotF16AVX512r1h; otherwise it leaves a.h empty.
func (a *acts) packF16(rows, cols int) {
	a.h = a.h[:0]
	if !useAVX512 || rows != 1 || cols%64 != 0 || cols == 0 || cols >= f16RowsMinCols {
		return
	}
	a.h = grow(a.h, cols)
	toF16s(a.h, a.f[:cols])
}

// f16Rows is fastRows for F16 weights with AVX-512 and one token of a multiple
// of 64 columns: rows [lo, r) through dotF16AVX512r1h (fewer than
// f16RowsMinCols columns) or four at a time through dotF16AVX512r4; it returns
// r. Both give dotF16Row's bits.
func (m *matMul) f16Rows(lo, hi int) int {
	cols := m.a.cols
	if cols%64 != 0 || cols == 0 || lo >= hi {
		return lo
	}
	if cols < f16RowsMinCols {
		h := m.a.h
		if len(h) != cols {
			return lo
		}
		_ = m.w.Data[hi*m.rb-1]
		_ = m.dst[hi-1]
		for r := lo; r < hi; r++ {
			dotF16AVX512r1h(&m.w.Data[r*m.rb], m.rb, &h[0], cols, &m.dst[r])
		}
		return hi
	}
	x := m.a.f[:cols]
	r := lo
	for ; r+4 <= hi; r += 4 {
		_ = m.w.Data[(r+4)*m.rb-1]
		_ = m.dst[r+3]
		dotF16AVX512r4(&m.w.Data[r*m.rb], m.rb, &x[0], cols, &m.dst[r])
	}
	return r
}
