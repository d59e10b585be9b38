package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRepackQ8_0MatchesReference: a Q5_0 or IQ4_NL row repacked into Q8_0 blocks
// dequantizes to the same values and its Q8_0 dot product has the bits of the
// type's own reference dot product, on random rows and on rows of every extreme
// quant (all 0s, all 31s / 15s).
func TestRepackQ8_0MatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	const nb = 24
	x := randRow(r, nb*qk0, 1)
	y := make([]q8Block, nb)
	quantRowsQ8_0(y, x, 7)
	for _, typ := range []Type{Q5_0, IQ4_NL} {
		rows := map[string][]byte{}
		row := make([]byte, typ.RowBytes(nb*qk0))
		fillRow(r, typ, row, 0.1)
		rows["random"] = row
		for _, fillByte := range []byte{0x00, 0xff} {
			ext := make([]byte, len(row))
			copy(ext, row)
			bb := typ.BlockBytes()
			for b := 0; b < nb; b++ {
				for i := 2; i < bb; i++ { // keep d, set every quant bit
					ext[b*bb+i] = fillByte
				}
			}
			rows[map[byte]string{0: "zeros", 0xff: "ones"}[fillByte]] = ext
		}
		for name, row := range rows {
			q8 := make([]byte, Q8_0.RowBytes(nb*qk0))
			repackRowQ8_0(q8, typ, row, nb)
			want, got := make([]float32, nb*qk0), make([]float32, nb*qk0)
			DequantizeRow(want, typ, row)
			DequantizeRow(got, Q8_0, q8)
			for i := range want {
				if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
					t.Fatalf("%v %s: value %d repacked %v, want %v", typ, name, i, got[i], want[i])
				}
			}
			var ref, d float32
			if typ == Q5_0 {
				ref, d = dotQ5_0RowGeneric(row, y), dotQ8_0RowGeneric(q8, y)
			} else { // the fused step (dotQ8_0FAVX512x16t*)
				ref, d = dotIQ4NLRowGeneric(row, y), dotQ8_0FusedRow(q8, y)
			}
			if math.Float32bits(d) != math.Float32bits(ref) {
				t.Fatalf("%v %s: Q8_0 dot of the repacked row %v, the reference's %v", typ, name, d, ref)
			}
		}
	}
}

// BenchmarkMatMulPrompt: a prompt's projection (128 tokens through a 1024×1024
// matrix), per type: Q5_0 and IQ4_NL take the repacked Q8_0 kernels where the CPU
// has AVX-512, so they should land near Q8_0 and Q4_0; F16 and BF16 take the
// multi-token kernels of floattile_amd64.go.
func BenchmarkMatMulPrompt(b *testing.B) {
	r := rand.New(rand.NewPCG(21, 22))
	const rows, cols, nTok = 1024, 1024, 128
	x := randRow(r, nTok*cols, 1)
	dst := make([]float32, nTok*rows)
	for _, typ := range []Type{Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_1, Q4_K, Q5_K, Q6_K, Q3_K, F16, BF16, Q5_1, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0, TQ2_0} {
		b.Run(typ.String(), func(b *testing.B) {
			w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: make([]byte, rows*typ.RowBytes(cols))}
			for i := 0; i < rows; i++ {
				fillRow(r, typ, w.Row(i), 0.1)
			}
			for b.Loop() {
				MatMul(dst, w, x, nTok)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/nTok, "ns/token")
		})
	}
}

// dotQ8_0FusedRow is dotQ8_0RowGeneric with the fused step of Q4_0 and IQ4_NL,
// sum = fma(isum, f16(x.d)·y.d, sum): the numerics of dotQ8_0FAVX512x16t*, which
// take IQ4_NL's prompts repacked into Q8_0 blocks.
func dotQ8_0FusedRow(row []byte, y []q8Block) float32 {
	var sum float32
	for b := range y {
		blk := row[b*34 : (b+1)*34]
		var isum int32
		for j, q := range y[b].qs {
			isum += int32(int8(blk[2+j])) * int32(q)
		}
		sum = float32(math.FMA(float64(float32(isum)), float64(f16Table[le16(blk)]*y[b].d), float64(sum)))
	}
	return sum
}
