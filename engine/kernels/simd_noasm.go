//go:build !amd64 || purego

package kernels

func dotQ4KRow(row []byte, y []q8KBlock) float32   { return dotQ4KRowGeneric(row, y) }
func dotQ6KRow(row []byte, y []q8KBlock) float32   { return dotQ6KRowGeneric(row, y) }
func dotQ5KRow(row []byte, y []q8KBlock) float32   { return dotQ5KRowGeneric(row, y) }
func dotIQ4XSRow(row []byte, y []q8KBlock) float32 { return dotIQ4XSRowGeneric(row, y) }
func dotQ8_0Row(row []byte, y []q8Block) float32   { return dotQ8_0RowGeneric(row, y) }
func dotQ4_0Row(row []byte, y []q8Block) float32   { return dotQ4_0RowGeneric(row, y) }
func dotQ3KRow(row []byte, y []q8KBlock) float32   { return dotQ3KRowGeneric(row, y) }
func dotQ2KRow(row []byte, y []q8KBlock) float32   { return dotQ2KRowGeneric(row, y) }
func dotQ5_1Row(row []byte, y []q8_1Block) float32 { return dotQ5_1RowGeneric(row, y) }
func dotQ4_1Row(row []byte, y []q8_1Block) float32 { return dotQ4_1RowGeneric(row, y) }
func dotQ5_0Row(row []byte, y []q8Block) float32   { return dotQ5_0RowGeneric(row, y) }
func dotIQ4NLRow(row []byte, y []q8Block) float32  { return dotIQ4NLRowGeneric(row, y) }
func dotTQ2_0Row(row []byte, y []q8KBlock) float32 { return dotKRowGeneric(dotTQ2_0Block, 66, row, y) }
func dotTQ1_0Row(row []byte, y []q8KBlock) float32 { return dotKRowGeneric(dotTQ1_0Block, 54, row, y) }
func dotIQ2XXSRow(row []byte, y []q8KBlock) float32 {
	return dotKRowGeneric(dotIQ2XXSBlock, 66, row, y)
}
func dotIQ2XSRow(row []byte, y []q8KBlock) float32 { return dotKRowGeneric(dotIQ2XSBlock, 74, row, y) }
func dotIQ2SRow(row []byte, y []q8KBlock) float32  { return dotKRowGeneric(dotIQ2SBlock, 82, row, y) }
func dotIQ3XXSRow(row []byte, y []q8KBlock) float32 {
	return dotKRowGeneric(dotIQ3XXSBlock, 98, row, y)
}
func dotIQ3SRow(row []byte, y []q8KBlock) float32 { return dotIQ3SRowGeneric(row, y) }
func dotIQ1SRow(row []byte, y []q8KBlock) float32 { return dotIQ1SRowGeneric(row, y) }
func dotIQ1MRow(row []byte, y []q8KBlock) float32 { return dotKRowGeneric(dotIQ1MBlock, 56, row, y) }
func dotF32Row(row []byte, x []float32) float32   { return dotF32RowGeneric(row, x) }
func dotF16Row(row []byte, x []float32) float32   { return dotF16RowGeneric(row, x) }
func dotBF16Row(row []byte, x []float32) float32  { return dotBF16RowGeneric(row, x) }

func simdLevels() []string { return []string{"generic"} }

func setSIMD(string) (restore func()) { return func() {} }

func dotQ4KRows(out []float32, row []byte, y []q8KBlock, nb int) {
	dotQ4KRowsGeneric(out, row, y, nb)
}

func dotQ5KRows(out []float32, row []byte, y []q8KBlock, nb int) {
	dotQ5KRowsGeneric(out, row, y, nb)
}

func dotF32VecDot(row []byte, x []float32) float32 { return dotF32VecDotGeneric(row, x) }

func dotQ3KRows(out []float32, row []byte, y []q8KBlock, nb int) {
	for t := range out {
		out[t] = dotQ3KRowGeneric(row, y[t*nb:(t+1)*nb])
	}
}

func dotQ6KRows(out []float32, row []byte, y []q8KBlock, nb int) {
	dotQ6KRowsGeneric(out, row, y, nb)
}

// pairsQ6K: no acts.q6P without the assembly kernels.
func pairsQ6K(wt Type, rows int) bool { return false }

func dotQ6KRowsPairs(out []float32, row []byte, a *acts, t0, nb int) {
	dotQ6KRows(out, row, a.q8k[t0*nb:], nb)
}

func dotQ8_0Rows(out []float32, row []byte, y []q8Block, nb int) {
	dotQ8_0RowsGeneric(out, row, y, nb)
}

func (m *matMul) fastRows(lo, hi int) int { return lo }

func (a *acts) packBF16(rows, cols int) {}

func (a *acts) packF16(rows, cols int) {}

func (m *matMul) fastTokens(r, hi, t0, nt int) int { return 0 }

func (m *matMul) tiles() bool { return false }

// permutesActs: bsT and q8kP for the 16-token kernels (the generic code reads
// neither).
func permutesActs(wt Type, rows int) bool { return rows >= 16 }

func simdAvailable() bool { return false }

func (m *matMul) repackTokens(lo, hi int) int { return lo }

func dotTQ1_0Rows(out []float32, row []byte, y []q8KBlock, nb int) {
	for t := range out {
		out[t] = dotKRowGeneric(dotTQ1_0Block, 54, row, y[t*nb:(t+1)*nb])
	}
}

func dotIQ3SRows(out []float32, row []byte, y []q8KBlock, nb int) {
	for t := range out {
		out[t] = dotIQ3SRowGeneric(row, y[t*nb:(t+1)*nb])
	}
}

func dotLatticeRows(typ Type, out []float32, row []byte, y []q8KBlock, nb int) {
	for t := range out {
		if typ == IQ1_S {
			out[t] = dotIQ1SRowGeneric(row, y[t*nb:(t+1)*nb])
			continue
		}
		out[t] = dotKRowGeneric(refCodecOf(typ).dotK, typ.BlockBytes(), row, y[t*nb:(t+1)*nb])
	}
}

func dotQ4_1Rows(out []float32, row []byte, y []q8_1Block, nb int) {
	for t := range out {
		out[t] = dotQ4_1RowGeneric(row, y[t*nb:(t+1)*nb])
	}
}

func dotQ5_1Rows(out []float32, row []byte, y []q8_1Block, nb int) {
	for t := range out {
		out[t] = dotQ5_1RowGeneric(row, y[t*nb:(t+1)*nb])
	}
}
