//go:build !purego

package kernels

// f16RowsMinCols is the least number of columns for which one-token F16
// products take four rows a call (dotF16AVX512r4). A row's float32
// activations take 4·cols bytes of the core's 32 KiB L1 data cache; from 4096
// columns on, the weights streaming by evict them before the next row comes
// back to them, and one row a call (dotF16AVX512) read them from L2 again for
// every row: at 8192 columns (a 1b model's ffn_down) it used ~1.6× the CPU
// time of a plain read of the same bytes, four rows a call ~1.05×; at 2048
// columns one row a call is within ~10% of the read and four rows gain
// nothing (BenchmarkF16DecodeRows, Zen4, loaded).
const f16RowsMinCols = 4096

// f16Rows is fastRows for F16 weights with AVX-512 and one token: rows [lo, r)
// four at a time through dotF16AVX512r4, whose outputs have dotF16Row's bits,
// for rows of a multiple of 64 columns, at least f16RowsMinCols; it returns r.
func (m *matMul) f16Rows(lo, hi int) int {
	cols := m.a.cols
	if cols < f16RowsMinCols || cols%64 != 0 || lo >= hi {
		return lo
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
