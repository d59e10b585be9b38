//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"syscall"
	"testing"
	"unsafe"
)

// TestF16RowsKernel: dotF16AVX512r4 and dotF16AVX512r1h give each of their
// rows the bits of dotF16Row and of dotFloatSIMDOrder (the kernels' order in
// Go), at a row stride that is not the row length, and write only their
// outputs.
func TestF16RowsKernel(t *testing.T) {
	requireSIMD(t, "avx512")
	r := rand.New(rand.NewPCG(81, 82))
	const guard = -12345.5
	for _, n := range []int{64, 128, 768, 4096} {
		const pad = 96 // bytes between rows
		rb := 2*n + pad
		data := make([]byte, 4*rb)
		w := make([][]float32, 4)
		for i := range w {
			QuantizeRow(data[i*rb:i*rb+2*n], F16, randRow(r, n, 0.5))
			w[i] = make([]float32, n)
			DequantizeRow(w[i], F16, data[i*rb:i*rb+2*n])
		}
		x := randRow(r, n, 2)
		roundF16s(x, x)
		xh := make([]uint16, n)
		toF16s(xh, x)
		for _, R := range []int{4, 1} {
			out := []float32{guard, guard, guard, guard, guard, guard}
			if R == 4 {
				dotF16AVX512r4(&data[0], rb, &x[0], n, &out[1])
			} else {
				dotF16AVX512r1h(&data[0], rb, &xh[0], n, &out[1])
			}
			for i, v := range out {
				if (i == 0 || i > R) && v != guard {
					t.Fatalf("%d columns, %d rows: %v, written outside the outputs", n, R, out)
				}
			}
			for i := range R {
				got := out[1+i]
				if want := dotFloatSIMDOrder(w[i], x); math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("%d columns, %d rows, row %d: %v, the kernels' order in Go %v", n, R, i, got, want)
				}
				if one := dotF16Row(data[i*rb:i*rb+2*n], x); math.Float32bits(got) != math.Float32bits(one) {
					t.Fatalf("%d columns, %d rows, row %d: %v, one-row kernel %v", n, R, i, got, one)
				}
			}
		}
	}
}

// TestF16RowsMatMul: one-token F16 products through f16Rows (dotF16AVX512r1h
// below f16RowsMinCols columns; dotF16AVX512r4 from it, then one row a call
// for the rows left over) have the bits of the AVX2 level's one row a call, on
// 1 and 2 threads.
func TestF16RowsMatMul(t *testing.T) {
	requireSIMD(t, "avx512")
	r := rand.New(rand.NewPCG(83, 84))
	for _, cols := range []int{64, 2048, f16RowsMinCols - 1, 4160, 8192 + 64} {
		const rows = 71 // not a multiple of 4
		w := Matrix{Type: F16, Rows: rows, Cols: cols, Data: make([]byte, rows*F16.RowBytes(cols))}
		for i := 0; i < rows; i++ {
			fillRow(r, F16, w.Row(i), 0.1)
		}
		x := randRow(r, cols, 1)
		restore := setSIMD("avx2")
		want := make([]float32, rows)
		MatMul(want, w, x, 1)
		restore()
		for _, th := range []int{1, 2} {
			restore := SetThreads(th)
			got := make([]float32, rows)
			MatMul(got, w, x, 1)
			SetThreads(restore)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%d columns, %d threads, row %d: %v, AVX2 %v", cols, th, i, got[i], want[i])
				}
			}
		}
	}
}

// BenchmarkF16DecodeRows: one token through F16 matrices larger than the caches
// (128 MiB, huge pages) at 2048, 4096 and 8192 columns, one thread, as the
// thread's CPU time per pass (cpu-ms/op, the median) and the rate it reads the
// weights at (cpu-GB/s): one row a call (dotF16AVX512; dotF16AVX512r1h with
// binary16 activations), four (dotF16AVX512r4),
// BF16's one-token kernel on the same bytes (dotBF16DPt1, where the CPU has
// it) and a plain read (Go, eight words at a time) for scale. f16RowsMinCols is
// set from it.
func BenchmarkF16DecodeRows(b *testing.B) {
	if !useAVX512 {
		b.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(85, 86))
	for _, cols := range []int{2048, 4096, 8192} {
		rows := (128 << 20) / (2 * cols)
		rb := 2 * cols
		// Anonymous memory with transparent huge pages where the kernel gives
		// them, as a model's mapping has (gguf's adviseHugePages).
		data, err := syscall.Mmap(-1, 0, rows*rb, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			b.Fatal(err)
		}
		defer syscall.Munmap(data)
		_ = syscall.Madvise(data, 14) // MADV_HUGEPAGE
		for i := 0; i < 64; i++ {
			fillRow(r, F16, data[i*rb:(i+1)*rb], 0.1)
		}
		for i := 64; i < rows; i++ {
			copy(data[i*rb:(i+1)*rb], data[(i%64)*rb:])
		}
		x := randRow(r, cols, 1)
		roundF16s(x, x)
		out := make([]float32, rows)
		xh := make([]uint16, cols)
		toF16s(xh, x)
		bp := make([]uint16, bf16PairWords(cols))
		packBF16Pairs(bp, x, cols)
		for _, k := range []struct {
			name string
			f    func()
		}{
			{"row", func() {
				for i := 0; i < rows; i++ {
					out[i] = dotF16AVX512(&data[i*rb], &x[0], cols)
				}
			}},
			{"r1h", func() {
				for i := 0; i < rows; i++ {
					dotF16AVX512r1h(&data[i*rb], rb, &xh[0], cols, &out[i])
				}
			}},
			{"r4", func() {
				for i := 0; i < rows; i += 4 {
					dotF16AVX512r4(&data[i*rb], rb, &x[0], cols, &out[i])
				}
			}},
			{"bf16dp", func() {
				if !useBF16DP {
					return
				}
				for i := 0; i < rows; i++ {
					dotBF16DPt1(&data[i*rb], &bp[0], 0, cols, &out[i], 0)
				}
			}},
			{"bf16dp4", func() {
				if !useBF16DP {
					return
				}
				for i := 0; i < rows; i += 4 {
					dotBF16DPr4(&data[i*rb], rb, &bp[0], cols, &out[i])
				}
			}},
			{"read", func() {
				wd := unsafe.Slice((*uint64)(unsafe.Pointer(&data[0])), len(data)/8)
				var a [8]uint64
				for i := 0; i+8 <= len(wd); i += 8 {
					v := (*[8]uint64)(unsafe.Pointer(&wd[i]))
					a[0] += v[0]
					a[1] += v[1]
					a[2] += v[2]
					a[3] += v[3]
					a[4] += v[4]
					a[5] += v[5]
					a[6] += v[6]
					a[7] += v[7]
				}
				out[0] = float32(a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7])
			}},
		} {
			b.Run(fmt.Sprintf("%d/%s", cols, k.name), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				var cpu []float64
				for b.Loop() {
					t0 := threadCPUSeconds()
					k.f()
					cpu = append(cpu, threadCPUSeconds()-t0)
				}
				sort.Float64s(cpu)
				med := cpu[len(cpu)/2]
				b.ReportMetric(med*1e3, "cpu-ms/op")
				b.ReportMetric(float64(len(data))/med/1e9, "cpu-GB/s")
			})
		}
	}
}

// threadCPUSeconds is the calling thread's CPU time (RUSAGE_THREAD).
func threadCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1, &ru); err != nil { // RUSAGE_THREAD
		panic(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
