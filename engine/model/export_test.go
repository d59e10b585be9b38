package model

import "github.com/lmlite/lmlite/engine/kernels"

// SetTiledAttention switches the forward pass between attendTiles and attendRange,
// for TestTiledAttentionMatchesPerHead.
func SetTiledAttention(on bool) (restore func()) {
	prev := tiledAttention
	tiledAttention = on
	return func() { tiledAttention = prev }
}

// PackedQ4KRows is how many of the layers' Q4_K rows Load packed (PackQ4K), for
// TestPackedQ4KMatchesPlain.
func (m *Model) PackedQ4KRows() int {
	n := 0
	for _, ly := range m.layers {
		for _, w := range []*kernels.Matrix{&ly.wq, &ly.wk, &ly.wv, &ly.wo, &ly.gate, &ly.up, &ly.down} {
			n += w.Packed
		}
	}
	return n
}
