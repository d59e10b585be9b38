package kernels

// dotIQ1SRowGeneric is ggml_vec_dot_iq1_s_q8_K (x86, the AVX2 path llama.cpp's
// AVX2 and AVX-512 builds take) bit for bit (issue 32): 8 float lanes, lane k
// adding, for each block, the exact integer sum Σ ls·grid·q8 of the products at
// positions 4k..4k+3 of each 32 weights, times f16(x.d)·y.d, in one fused
// multiply-add; the shifts' sum sumi1 = Σ ls·delta·(the 32 activations' sum, from
// the bsums) added to a scalar as acc1 = fma(d, sumi1, acc1); at the end the lanes
// summed as sum8 (hsum_float_8), then 0.125·acc1 added.
func dotIQ1SRowGeneric(row []byte, y []q8KBlock) float32 {
	var acc [8]float32
	var acc1 float32
	_ = row[len(y)*50-1]
	for b := range y {
		blk := row[b*50 : (b+1)*50]
		yb := &y[b]
		var lane [8]int32
		var sumi1 int32
		for ib := 0; ib < 8; ib++ {
			h := uint32(le16(blk[34+2*ib:]))
			ls := int32(2*(h>>12&7) + 1)
			q8 := yb.qs[32*ib : 32*ib+32]
			for l := 0; l < 4; l++ {
				grid := iq1Grid(uint32(blk[2+4*ib+l]) | (h>>(3*l)&7)<<8)
				for j := 0; j < 8; j++ {
					lane[2*l+j/4] += ls * int32(q8[8*l+j]) * int32(int8(grid>>(8*j)))
				}
			}
			s := ls * (int32(yb.bsums[2*ib]) + int32(yb.bsums[2*ib+1]))
			if h&0x8000 != 0 {
				s = -s
			}
			sumi1 += s
		}
		d := yb.d * f16Table[le16(blk)]
		for k := range acc {
			acc[k] = fmaf(d, float32(lane[k]), acc[k])
		}
		acc1 = fmaf(d, float32(sumi1), acc1)
	}
	return sum8(&acc) + iq1Delta*acc1
}
