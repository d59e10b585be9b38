//go:build !purego

package kernels

// f16RowsMinCols is the least number of columns for which one-token F16
// products take four rows a call (dotF16AVX512r4). A row's float32
// activations take 4·cols bytes of the core's 32 KiB L1 data cache; from 4096
// columns on, the weights streaming by evict them before the next row comes
// back to them, and one row a call (dotF16AVX512) reads them from L2 again
// for every row. BenchmarkF16DecodeRows (Zen4, loaded, one thread, huge
// pages), cpu-GB/s of weights, one row a call against four: 2048 columns
// 21.5 against 18.4 (one row a call reads a single stream, as fast as BF16's
// kernel); 4096 16.6 against 17.1; 8192 (a 1b model's ffn_down) 12.4 against
// 17.8. Software prefetches (PREFETCHT0/T1/NTA, 0.5–8 KiB ahead) did not
// help; binary16 activations did one row a call at 4096 and 8192 columns
// (0.62× and 0.78× its CPU time), but four rows stayed ahead at 8192.
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
