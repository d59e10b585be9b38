//go:build unix

package kernels

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
)

// cpuSeconds is the process's user + system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// BenchmarkMatMulCPU: MatMul on one thread, as the process's CPU time per call
// (cpu-us/op) beside the wall time, for a prompt's product (128 tokens through
// 1024×1024), a mixture of experts' short one (4 tokens), F32's verification
// step of 1 + 8 positions (9 tokens), a 16-sequence
// decoding step's (16 tokens) and decoding (one token
// through 4096×4096, larger than L2). CPU time is what to compare on a machine
// other processes load (docs/PERFORMANCE.md, "llama.cpp's float order").
func BenchmarkMatMulCPU(b *testing.B) {
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(21, 22))
	for _, typ := range []Type{Q8_0, Q4_0, Q4_1, Q5_1, Q3_K, Q5_K, IQ3_S, F32, BF16, F16, IQ4_NL} {
		for _, c := range []struct {
			name             string
			rows, cols, nTok int
		}{{"prompt128", 1024, 1024, 128}, {"tokens4", 1024, 1024, 4}, {"tokens9", 1024, 1024, 9}, {"tokens16", 1024, 1024, 16}, {"decode", 4096, 4096, 1}} {
			if c.nTok == 9 && typ != F32 {
				continue // a verification step of 1 + 8 positions on F32 weights (stories260K)
			}
			x := randRow(r, c.nTok*c.cols, 1)
			dst := make([]float32, c.nTok*c.rows)
			w := Matrix{Type: typ, Rows: c.rows, Cols: c.cols, Data: make([]byte, c.rows*typ.RowBytes(c.cols))}
			for i := 0; i < c.rows; i++ {
				fillRow(r, typ, w.Row(i), 0.1)
			}
			run := func(name string) {
				b.Run(name, func(b *testing.B) {
					t0 := cpuSeconds()
					for b.Loop() {
						MatMul(dst, w, x, c.nTok)
					}
					b.ReportMetric((cpuSeconds()-t0)*1e6/float64(b.N), "cpu-us/op")
				})
			}
			run(fmt.Sprintf("%v/%s", typ, c.name))
			if typ == BF16 && setBF16DP(false) {
				// The AVX-512 FMA kernels that VDPBF16PS's replaced.
				run(fmt.Sprintf("%v-fma/%s", typ, c.name))
				setBF16DP(true)
			}
		}
	}
}
