package model

// SetTiledAttention switches the forward pass between attendTiles and attendRange,
// for TestTiledAttentionMatchesPerHead.
func SetTiledAttention(on bool) (restore func()) {
	prev := tiledAttention
	tiledAttention = on
	return func() { tiledAttention = prev }
}
