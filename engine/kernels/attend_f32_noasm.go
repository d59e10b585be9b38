//go:build !amd64 || purego

package kernels

func attnCvtF32(k, v []uint16, stride, m, hd int, kf, vf []float32) {
	attnCvtF32Generic(k, v, stride, m, hd, kf, vf)
}

func attnChunkF32(q, kf, vf []float32, hd, m int, acc []float32, st *[2]float32, p *[attnF32Chunk]float32) {
	attnChunkF32Generic(q, kf, vf, hd, m, acc, st, p)
}

func attnF32Direct(hd, bt int) bool { return false }

func attnChunkF32F16(q []float32, kp, vp, kn *[4]*uint16, stride, m int, acc []float32, st *[2]float32, p *[attnF32Chunk]float32) {
	panic("kernels: attnChunkF32F16 without AVX-512")
}

// FastAttnF32 reports whether AttendBlocksTileF32 runs on assembly for head size
// hd: never without it.
func FastAttnF32(hd int) bool { return false }
