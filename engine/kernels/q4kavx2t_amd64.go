//go:build !purego

package kernels

import "unsafe"

// usesQ4KAVX2T reports whether products of rows tokens by weights of type wt go
// through the AVX2 few-token Q4_K kernels (dotQ4KRowsT), so that acts lays out
// q8kA: Q4_K on a CPU with AVX2 and without the AVX-512 VNNI tiles, when the
// tokens leave 3, 5, 6, 7 or 9 after the eights (a k = 2, 4, 5, 6 or 8
// verification step; some prompts). Without q8kA, dotQ4KRowsMixed takes
// dotQ4KRows' kernels alone (the same bits).
func usesQ4KAVX2T(wt Type, rows int) bool {
	if wt != Q4_K || !useQ4KAVX2T || !useAVX2 || useAVX512 || rows < 2 {
		return false
	}
	// matMul.rows takes the tokens by tokChunk: whole chunks go by eights; the
	// last (or only) one is what dotQ4KRowsMixed may give these kernels.
	n := rows
	if rows > tokChunk {
		n = rows % tokChunk
	}
	for n >= 10 || n == 8 {
		n -= 8
	}
	return n == 3 || n >= 5
}

// useQ4KAVX2T turns the path off for the tests and benchmarks that compare it
// with dotQ4KRows' kernels.
var useQ4KAVX2T = true

// dotQ4KRowsMixed is dotQ4KRows for tokens t0, t0+1, … of a (which has q8kA):
// eight at a time through dotQ4KAVX2x8 while 10 or more or exactly 8 are left,
// then 2 or 4 through dotQ4KRows' kernels and 3, 5, 6, 7 or 9 through
// dotQ4KRowsT in one pass (where dotQ4KRows would make a second pass over the
// row for the last one or three). dotQ4KAVX2t8 took 1.04–1.3× the CPU of x8 and
// t2 about x2's (BenchmarkQ4KAVX2Tokens, Zen3, loaded), so those stay. Every
// token gets dotQ4KRow's bits either way.
func dotQ4KRowsMixed(out []float32, row []byte, a *acts, t0, nb int) {
	t, n := 0, len(out)
	for n-t >= 10 || n-t == 8 {
		dotQ4KRows(out[t:t+8], row, a.q8k[(t0+t)*nb:], nb)
		t += 8
	}
	switch n - t {
	case 0:
	case 1, 2, 4:
		dotQ4KRows(out[t:], row, a.q8k[(t0+t)*nb:], nb)
	default:
		dotQ4KRowsT(out[t:], row, a.q8kA[(t0+t)*nb:], nb)
	}
}

// dotQ4KRowsT sets out[t] = dotQ4KRow(row, token t) for each t < len(out) (at
// least 2), the tokens' blocks in q8kA's layout at y (nb a token): through
// dotQ4KAVX2t2 … t9, at most nine tokens a pass over the row (the remainder of
// 10 goes as 8 and 2). Every out[t] has dotQ4KRow's bits (and the reference's),
// whatever len(out).
func dotQ4KRowsT(out []float32, row []byte, y []q8KBlock, nb int) {
	n := len(out)
	_, _ = row[nb*144-1], y[n*nb-1]
	stride := nb * int(unsafe.Sizeof(y[0]))
	for t := 0; t < n; {
		c := n - t
		if c > 9 {
			c = 9
			if n-t-9 == 1 {
				c = 8
			}
		}
		x, yt, o := &row[0], (*byte)(unsafe.Pointer(&y[t*nb])), &out[t]
		switch c {
		case 2:
			dotQ4KAVX2t2(x, yt, nb, stride, o)
		case 3:
			dotQ4KAVX2t3(x, yt, nb, stride, o)
		case 4:
			dotQ4KAVX2t4(x, yt, nb, stride, o)
		case 5:
			dotQ4KAVX2t5(x, yt, nb, stride, o)
		case 6:
			dotQ4KAVX2t6(x, yt, nb, stride, o)
		case 7:
			dotQ4KAVX2t7(x, yt, nb, stride, o)
		case 8:
			dotQ4KAVX2t8(x, yt, nb, stride, o)
		case 9:
			dotQ4KAVX2t9(x, yt, nb, stride, o)
		default:
			panic("kernels: dotQ4KRowsT of one token")
		}
		t += c
	}
}
