package kernels

//go:generate go -C ../../_asm run . -out ../engine/kernels/simd_amd64.s -stubs ../engine/kernels/simd_stubs_amd64.go -pkg kernels

// Row dot products: one encoded weight row with one activation row in the weight
// type's vec-dot format. dotXxxRow (simd_amd64.go, simd_noasm.go) pick an assembly
// kernel when the CPU has one; the dotXxxRowGeneric functions here are the pure-Go
// versions, built everywhere (the purego build, CPUs without AVX2, the tests).
// Each takes a row of exactly len(y) blocks (len(x) elements for the float types).

func dotQ4KRowGeneric(row []byte, y []q8KBlock) float32 {
	var sum float32
	for b := range y {
		sum += dotQ4KBlock(row[b*144:(b+1)*144], &y[b])
	}
	return sum
}

func dotQ6KRowGeneric(row []byte, y []q8KBlock) float32 {
	var sum float32
	for b := range y {
		sum += dotQ6KBlock(row[b*210:(b+1)*210], &y[b])
	}
	return sum
}

// The Q8_0, Q4_0 and float references are the loops inside dotRow; these reach
// them through a one-row acts.

func dotQ8_0RowGeneric(row []byte, y []q8Block) float32 {
	return dotRow(Q8_0, row, &acts{typ: Q8_0, cols: len(y) * qk0, q8: y, rows: 1}, 0)
}

func dotQ4_0RowGeneric(row []byte, y []q8Block) float32 {
	return dotRow(Q4_0, row, &acts{typ: Q8_0, cols: len(y) * qk0, q8: y, rows: 1}, 0)
}

func dotF32RowGeneric(row []byte, x []float32) float32 {
	return dotRow(F32, row, &acts{typ: F32, cols: len(x), f: x, rows: 1}, 0)
}

func dotF16RowGeneric(row []byte, x []float32) float32 {
	return dotRow(F16, row, &acts{typ: F16, cols: len(x), f: x, rows: 1}, 0)
}

func dotBF16RowGeneric(row []byte, x []float32) float32 {
	return dotRow(BF16, row, &acts{typ: BF16, cols: len(x), f: x, rows: 1}, 0)
}
