package kernels

// The inner loops of Attend, in pure Go: the reference for the assembly of
// attn_amd64.go, and the code everywhere else. Their order of operations is
// llama.cpp's CPU flash attention over an F16 cache (see Attend).

// attnLanesGeneric adds k[i]·q[i] into lanes[i%8], each product rounded to float32
// before it is added.
func attnLanesGeneric(k []uint16, q []float32, lanes *[8]float32) {
	for i, x := range q {
		lanes[i%8] += f16Table[k[i]] * x
	}
}

// attnMadGeneric sets acc[i] = f16(acc[i] + v[i]·s).
func attnMadGeneric(acc, v []uint16, s float32) {
	for i, a := range acc {
		acc[i] = F32ToF16(f16Table[a] + f16Table[v[i]]*s)
	}
}

// attnScaleGeneric sets acc[i] = f16(acc[i]·s).
func attnScaleGeneric(acc []uint16, s float32) {
	for i, a := range acc {
		acc[i] = F32ToF16(f16Table[a] * s)
	}
}
