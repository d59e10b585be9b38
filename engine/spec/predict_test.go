package spec

import (
	"slices"
	"testing"
)

// TestPredictedTrace: a prediction drafts its next tokens while the output follows
// it, re-aligns after the output leaves it (at the output's last n-gram, forward of
// where the output had reached before an earlier occurrence), and drafts nothing
// where the output's recent tokens occur nowhere in it.
func TestPredictedTrace(t *testing.T) {
	//               0   1   2   3   4   5   6   7   8   9  10  11
	pred := []int32{10, 11, 12, 13, 14, 15, 11, 12, 16, 17, 18, 19}
	p := NewPredicted(pred)
	seq := []int32{1, 2, 3} // the prompt
	step := func(out []int32, k int, want []int32) {
		t.Helper()
		for _, o := range out {
			seq = append(seq, o)
			p.Advance(o)
		}
		if got := p.Draft(nil, seq, k); !slices.Equal(got, want) {
			t.Fatalf("after %v: Draft(k=%d) = %v, want %v (pos %d, far %d)", out, k, got, want, p.Pos, p.Far)
		}
	}
	step(nil, 3, []int32{10, 11, 12})         // aligned at the start
	step([]int32{10, 11}, 2, []int32{12, 13}) // following
	step([]int32{12, 13, 14, 15}, 4, []int32{11, 12, 16, 17})
	step([]int32{11, 12, 99}, 3, nil) // left it: "12 99" occurs nowhere
	step([]int32{17, 18}, 3, []int32{19})
	if p.Pos != 11 || p.Far != 8 {
		t.Fatalf("pos %d far %d after re-aligning at 17 18", p.Pos, p.Far)
	}
	step([]int32{19}, 3, nil) // the prediction's end
	step([]int32{11, 12}, 2, []int32{13, 14})
	// "11 12" occurs at 1 and at 6; Far is 12 now, past both: the first one wins.
	if p.Pos != 3 {
		t.Fatalf("re-aligned at %d, want 3", p.Pos)
	}
	q := NewPredicted(pred)
	q.Far = 5
	if got := q.align([]int32{7, 11, 12}); got != 8 {
		t.Fatalf("align forward of Far 5 = %d, want 8 (the occurrence at 6)", got)
	}
	if got := q.align([]int32{13, 14, 15, 11, 12}); got != 8 {
		t.Fatalf("align with the longest n-gram = %d, want 8", got)
	}
	if got := q.align([]int32{9, 10, 11, 12}); got != 3 {
		t.Fatalf("align 10 11 12 = %d, want 3 (the only 3-gram occurrence beats the forward bigram)", got)
	}
	var none Predicted
	if got := none.Draft(nil, seq, 4); got != nil {
		t.Fatalf("the zero Predicted drafted %v", got)
	}
}
