//go:build !purego

package kernels

// attnCvtF32 is attnCvtF32Generic, through the assembly on AVX-512 when hd is a
// multiple of 16.
func attnCvtF32(k, v []uint16, stride, m, hd int, kf, vf []float32) {
	if !useAVX512 || hd%16 != 0 || m <= 0 {
		attnCvtF32Generic(k, v, stride, m, hd, kf, vf)
		return
	}
	_ = k[(m-1)*stride+hd-1]
	_ = v[(m-1)*stride+hd-1]
	_ = kf[m*hd-1]
	_ = vf[m*hd-1]
	attnCvtF32AVX512(&k[0], &v[0], stride, m, hd, &kf[0], &vf[0])
}

// attnChunkF32 is attnChunkF32Generic, through the assembly on AVX-512 for head
// size 64: the same bits.
func attnChunkF32(q, kf, vf []float32, hd, m int, acc []float32, st *[2]float32, p *[attnF32Chunk]float32) {
	if !useAVX512 || hd != 64 || m <= 0 || m > attnF32Chunk {
		attnChunkF32Generic(q, kf, vf, hd, m, acc, st, p)
		return
	}
	_ = q[63]
	_ = acc[63]
	_ = kf[attnF32Chunk*64-1]
	_ = vf[m*64-1]
	attnChunkF32AVX512(&q[0], &kf[0], &vf[0], m, &acc[0], &st[0], &p[0])
}

// attnF32Direct reports whether attnChunkF32F16 runs for head size hd and pages of
// bt positions: AVX-512, head size 64, and groups of 16 positions within a page.
func attnF32Direct(hd, bt int) bool {
	return useAVX512 && hd == 64 && bt%16 == 0
}

// attnChunkF32F16 is attnChunkF32 with the chunk's keys and values read as binary16
// from the cache (attnChunkF32F16AVX512), where attnF32Direct: the same bits.
func attnChunkF32F16(q []float32, kp, vp, kn *[4]*uint16, stride, m int, acc []float32, st *[2]float32, p *[attnF32Chunk]float32) {
	_ = q[63]
	_ = acc[63]
	attnChunkF32F16AVX512(&q[0], kp, vp, kn, stride, m, &acc[0], &st[0], &p[0])
}

// FastAttnF32 reports whether AttendBlocksTileF32 runs on assembly for head size hd
// (AVX-512, head size 64) rather than on its Go reference: where float32 mode is
// worth taking by default.
func FastAttnF32(hd int) bool { return useAVX512 && hd == 64 }
