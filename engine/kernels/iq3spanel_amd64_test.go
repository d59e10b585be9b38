//go:build !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// TestIQ3SBytePanelDecoderAVX512: decodeIQ3SBytesAVX512 writes
// decodeIQ3SBytePanel's bytes and scales, into its slot only.
func TestIQ3SBytePanelDecoderAVX512(t *testing.T) {
	requireSIMD(t, "avx512")
	r := rand.New(rand.NewPCG(47, 2))
	for _, mode := range []string{"random", "ones", "zeros"} {
		const nb = 3
		for _, i := range []int{0, 7, iqPanelGroup - 1} {
			row := panelTestRow(r, IQ3_S, nb, mode)
			want, got := make([]byte, nb*iqPanelGroup*iq3sBPSlot), make([]byte, nb*iqPanelGroup*iq3sBPSlot)
			wdx, gdx := make([]float32, nb*iqPanelGroup), make([]float32, nb*iqPanelGroup)
			decodeIQ3SBytePanel(want, wdx, row, nb, i)
			decodeIQ3SBytesAVX512(&row[0], nb, &got[i*iq3sBPSlot], &gdx[i], (*byte)(unsafe.Pointer(&iq3sGrid[0])))
			if !slices.Equal(got, want) || !slices.Equal(gdx, wdx) {
				for k := range got {
					if got[k] != want[k] {
						t.Fatalf("%s slot %d: byte %d (%d in its slot) = %d, want %d", mode, i, k, k%iq3sBPSlot, got[k], want[k])
					}
				}
				t.Fatalf("%s slot %d: the scales differ", mode, i)
			}
		}
	}
}

// BenchmarkIQ3SPanels: BenchmarkPanel1b's product (2048 rows of 8192
// columns, one thread, random blocks) by 128 and 512 tokens through the byte
// panels and through the int16 panels, in CPU time.
func BenchmarkIQ3SPanels(b *testing.B) {
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(45, 4))
	const rows, cols = 2048, 8192
	w := Matrix{Type: IQ3_S, Rows: rows, Cols: cols, Data: randomBlocks(r, IQ3_S, rows*cols/qkK)}
	for _, nTok := range []int{128, 512} {
		x := randRow(r, nTok*cols, 1)
		dst := make([]float32, nTok*rows)
		for _, path := range []string{"bytes", "int16"} {
			b.Run(fmt.Sprintf("%d/%s", nTok, path), func(b *testing.B) {
				defer func(v bool) { iq3sBytePanels = v }(iq3sBytePanels)
				iq3sBytePanels = path == "bytes"
				t0 := cpuSeconds()
				for b.Loop() {
					MatMul(dst, w, x, nTok)
				}
				b.ReportMetric((cpuSeconds()-t0)*1e6/float64(b.N), "cpu-us/op")
			})
		}
	}
}
