//go:build unix

package kernels

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine/gguf"
)

// BenchmarkVerifyRoofline bounds what a verification step's products can cost on
// the model file named by LMLITE_BENCH_MODEL (skipped when unset). Its weight
// matrices (the layers' and the output projection: the bytes a decode step reads
// once) are
//
//   - stream: read once by bytes.Count, the weights' bytes and nothing else from
//     memory (what reading them costs at the least, one thread);
//   - stream-l2: as many bytes read from a 256 KiB piece that stays in L2 (the
//     reader itself is not the limit);
//   - mm/n=T: multiplied by T tokens' activations as MatMul does (the activations
//     quantized once per matrix, outside the timing): T = 1 is a decode step's
//     products, T = 9 a k = 8 verification's;
//   - l2/n=T: the same products on the first rows of each matrix (about 96 KiB),
//     repeated up to its row count: the same instructions with the weights in
//     L2 — the kernels' compute time without memory stalls;
//   - pk/n=T and pkl2/n=T: mm and l2 with the Q4_K matrices packed (PackQ4K).
//
// One thread (every product inline); cpu-ms/op is the process's CPU time per
// pass over every matrix. LMLITE_BENCH_TS lists the token counts (default 1,9);
// LMLITE_BENCH_ROOF picks the parts (comma-separated name prefixes, default all),
// LMLITE_BENCH_TYPE the matrices of one type (e.g. Q4_K; default all).
func BenchmarkVerifyRoofline(b *testing.B) {
	path := os.Getenv("LMLITE_BENCH_MODEL")
	if path == "" {
		b.Skip("LMLITE_BENCH_MODEL not set")
	}
	defer SetThreads(SetThreads(1))
	f, err := gguf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	hasOutput := false
	for i := range f.Tensors {
		hasOutput = hasOutput || f.Tensors[i].Name == "output.weight"
	}
	var ws []Matrix
	total, maxRows, maxCols := 0, 0, 0
	byType := map[Type]int{}
	for i := range f.Tensors {
		t := &f.Tensors[i]
		sh := t.Shape()
		if len(sh) != 2 || !strings.HasPrefix(t.Name, "blk.") && t.Name != "output.weight" && (hasOutput || t.Name != "token_embd.weight") {
			continue
		}
		w := Matrix{Type: Type(t.Type), Cols: int(sh[0]), Rows: int(sh[1]), Data: f.TensorData(t)}
		if only := os.Getenv("LMLITE_BENCH_TYPE"); only != "" && w.Type.String() != only {
			continue
		}
		ws = append(ws, w)
		total += len(w.Data)
		byType[w.Type] += len(w.Data)
		maxRows, maxCols = max(maxRows, w.Rows), max(maxCols, w.Cols)
	}
	var types []string
	for t, n := range byType {
		types = append(types, fmt.Sprintf("%v %.1f MiB", t, float64(n)/(1<<20)))
	}
	b.Logf("%d matrices, %.1f MiB: %s", len(ws), float64(total)/(1<<20), strings.Join(types, ", "))
	ts := []int{1, 9}
	if v := os.Getenv("LMLITE_BENCH_TS"); v != "" {
		ts = ts[:0]
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > 16 {
				b.Fatalf("LMLITE_BENCH_TS %q: want token counts 1-16", v)
			}
			ts = append(ts, n)
		}
	}
	x := make([]float32, 16*maxCols)
	seed := uint32(99)
	for i := range x {
		seed = seed*1664525 + 1013904223
		x[i] = float32(int32(seed>>8)-1<<23) / (1 << 23)
	}
	dst := make([]float32, 16*maxRows)
	parts := os.Getenv("LMLITE_BENCH_ROOF")
	run := func(name string, fn func()) {
		ok := parts == ""
		for _, p := range strings.Split(parts, ",") {
			ok = ok || p != "" && strings.HasPrefix(name, p)
		}
		if !ok {
			return
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(total))
			var cpu float64
			for b.Loop() {
				fn := fn
				c0 := cpuSeconds()
				fn()
				cpu += cpuSeconds() - c0
			}
			b.ReportMetric(cpu*1e3/float64(b.N), "cpu-ms/op")
		})
	}
	var sink int
	run("stream", func() {
		for _, w := range ws {
			sink += bytes.Count(w.Data, []byte{0x5a})
		}
	})
	piece := ws[0].Data[:min(len(ws[0].Data), 256<<10)]
	run("stream-l2", func() {
		for n := 0; n < total; n += len(piece) {
			sink += bytes.Count(piece, []byte{0x5a})
		}
	})
	// Each matrix's activations, quantized once (as MatMul's prepare) before the
	// timed passes: acts[T][i] for ws[i].
	prepared := map[int][]*acts{}
	for _, T := range ts {
		for _, w := range ws {
			a := new(acts)
			a.prepare(w.Type, x, T, w.Cols)
			prepared[T] = append(prepared[T], a)
		}
	}
	for _, T := range ts {
		run(fmt.Sprintf("mm/n=%d", T), func() {
			for i, w := range ws {
				mm := matMul{dst: dst, w: w, a: prepared[T][i], nTok: T, rb: w.Type.RowBytes(w.Cols)}
				mm.rows(0, w.Rows)
			}
		})
	}
	for _, T := range ts {
		run(fmt.Sprintf("l2/n=%d", T), func() {
			for i, w := range ws {
				rb := w.Type.RowBytes(w.Cols)
				r := min(w.Rows, max(16, (96<<10)/rb/16*16))
				small := w
				small.Rows, small.Data = r, w.Data[:r*rb]
				mm := matMul{dst: dst, w: small, a: prepared[T][i], nTok: T, rb: rb}
				for done := 0; done < w.Rows; done += r {
					mm.rows(0, r)
				}
			}
		})
	}
	// The same products with the Q4_K matrices packed (PackQ4K, on copies):
	// pk/n=T as mm/n=T, pkl2/n=T as l2/n=T.
	if parts == "" || strings.Contains(parts, "pk") {
		pws := make([]Matrix, len(ws))
		for i, w := range ws {
			pws[i] = w
			if w.Type == Q4_K {
				pws[i].Data = bytes.Clone(w.Data)
				PackQ4K(&pws[i])
			}
		}
		for _, T := range ts {
			run(fmt.Sprintf("pk/n=%d", T), func() {
				for i, w := range pws {
					mm := matMul{dst: dst, w: w, a: prepared[T][i], nTok: T, rb: w.Type.RowBytes(w.Cols)}
					mm.rows(0, w.Rows)
				}
			})
		}
		for _, T := range ts {
			run(fmt.Sprintf("pkl2/n=%d", T), func() {
				for i, w := range pws {
					rb := w.Type.RowBytes(w.Cols)
					r := min(w.Rows, max(16, (96<<10)/rb/16*16))
					small := w
					small.Rows, small.Data, small.Packed = r, w.Data[:r*rb], min(w.Packed, r)
					mm := matMul{dst: dst, w: small, a: prepared[T][i], nTok: T, rb: rb}
					for done := 0; done < w.Rows; done += r {
						mm.rows(0, r)
					}
				}
			})
		}
	}
	_ = sink
}
