package sample

import (
	"slices"
	"testing"
)

// TestLogitBiasForcesAndBansTokens: +100 makes greedy (and a draw) take a token that
// was far from the top, -100 bans the top one; with a mask the bias comes first and
// the mask still rules; the caller's row comes back as it was.
func TestLogitBiasForcesAndBansTokens(t *testing.T) {
	logits := []float32{5, 1, 0.5, -2, 3, 0}
	orig := slices.Clone(logits)
	for _, temp := range []float32{0, 0.8} {
		force := New(Params{Temperature: temp, Seed: 7, LogitBias: []Bias{{ID: 3, Bias: 100}}})
		if id := force.Sample(logits, nil); id != 3 {
			t.Errorf("temperature %v: +100 on token 3 picked %d", temp, id)
		}
		ban := New(Params{Temperature: 0, LogitBias: []Bias{{ID: 0, Bias: -100}}})
		if id := ban.Sample(logits, nil); id != 4 {
			t.Errorf("-100 on the top token picked %d, want the next (4)", id)
		}
		if !slices.Equal(logits, orig) {
			t.Fatalf("the row changed: %v", logits)
		}
	}
	// The mask allows 1 and 2 only: +100 on 3 cannot make it appear; +100 on 2 wins.
	allow := []uint64{1<<1 | 1<<2}
	if id := New(Params{LogitBias: []Bias{{ID: 3, Bias: 100}}}).SampleMasked(logits, nil, allow); id != 1 {
		t.Errorf("masked, +100 on a masked token: picked %d, want 1", id)
	}
	if id := New(Params{LogitBias: []Bias{{ID: 2, Bias: 100}}}).SampleMasked(logits, nil, allow); id != 2 {
		t.Errorf("masked, +100 on an allowed token: picked %d, want 2", id)
	}
	// Ids outside the row are ignored.
	if id := New(Params{LogitBias: []Bias{{ID: 99, Bias: 100}, {ID: -1, Bias: 100}}}).Sample(logits, nil); id != 0 {
		t.Errorf("out-of-row bias: picked %d", id)
	}
}
