package spec

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestLookup(t *testing.T) {
	for _, c := range []struct {
		seq  []int32
		k    int
		want []int32
	}{
		{[]int32{1, 2, 3, 4, 5, 1, 2}, 3, []int32{3, 4, 5}},             // bigram 1 2 seen before
		{[]int32{1, 2, 3, 4, 5, 1, 2}, 8, []int32{3, 4, 5, 1, 2}},       // to the end of the sequence
		{[]int32{1, 2, 3, 9, 2, 3, 7, 1, 2, 3}, 2, []int32{9, 2}},       // the 3-gram beats the later bigram 2 3
		{[]int32{5, 6, 7, 5, 6, 8, 5, 6}, 4, []int32{8, 5, 6}},          // the most recent occurrence
		{[]int32{1, 2, 3, 4}, 4, nil},                                   // nothing repeats
		{[]int32{1, 1, 1, 1}, 3, []int32{1}},                            // overlapping: 1 1 1 at 0 is followed by the last 1
		{[]int32{7, 7}, 3, nil},                                         // too short for a bigram before the suffix
		{[]int32{1, 2, 3, 1, 2}, 0, nil},                                // k 0
		{[]int32{4, 1, 2, 4, 1, 2, 3, 4, 1, 2}, 5, []int32{3, 4, 1, 2}}, // 4-gram? no: 3-gram 4 1 2 at 3 is most recent
	} {
		got := Lookup(nil, c.seq, c.k)
		if !slices.Equal(got, c.want) {
			t.Errorf("Lookup(%v, %d) = %v, want %v", c.seq, c.k, got, c.want)
		}
	}
}

// TestBest: the draft length that pays most for an acceptance chance and a cost:
// longer as drafts hit more often or cost less, none where even one draft costs
// more than it gives.
func TestBest(t *testing.T) {
	for _, c := range []struct {
		p, cost float64
		max     int
		want    int
	}{
		{0.5, 0.15, 8, 2},  // the prior: 1.75 tokens for 1.3 steps
		{0.75, 0.15, 8, 4}, // 3.05 tokens for 1.6 steps
		{0.9, 0.15, 8, 8},  // 6.13 tokens for 2.2 steps
		{0.9, 0.15, 16, 8}, // beyond 8 a draft adds less than it costs
		{0.9, 0.15, 3, 3},  // the limit
		{0.99, 0.05, 16, 16},
		{0.2, 0.15, 8, 1},  // 1.2 tokens for 1.15 steps: barely
		{0.14, 0.15, 8, 0}, // below the cost: plain decoding
		{0.5, 1, 8, 0},     // a draft costs a whole step: never
		{0, 0.01, 8, 0},
		{1, 0.15, 8, 8},
		{0.5, 0.15, 0, 0},
	} {
		if got := Best(c.p, c.cost, c.max); got != c.want {
			t.Errorf("Best(%v, %v, %d) = %d, want %d", c.p, c.cost, c.max, got, c.want)
		}
	}
}

// TestAdaptTrace runs the draft length controller through a trace of outcomes
// (drafted/accepted, or skip: a decode without verification) and checks its
// decision after each (max 8, cost 0.15): the length grows as drafts hit, falls
// after misses, and where no length pays drafting pauses, for a pause that doubles
// with each further miss, then probes with one token.
func TestAdaptTrace(t *testing.T) {
	const max, cost = 8, 0.15
	trace := `
start          want=2 misses=0 pause=0
2/2            want=8 misses=0 pause=0
4/4            want=8 misses=0 pause=0
8/8            want=8 misses=0 pause=0
8/3            want=7 misses=0 pause=0
8/0            want=4 misses=0 pause=0
6/0            want=3 misses=0 pause=0
3/0            want=2 misses=0 pause=0
2/0            want=1 misses=0 pause=0
1/0            want=1 misses=0 pause=0
1/0            want=1 misses=0 pause=0
1/0            want=1 misses=0 pause=0
1/0            want=0 misses=1 pause=4
skip           want=0 misses=1 pause=3
skip skip      want=0 misses=1 pause=1
skip           want=1 misses=1 pause=0
1/0            want=0 misses=2 pause=8
skip skip skip skip skip skip skip skip want=1 misses=2 pause=0
1/0            want=0 misses=3 pause=16
skip skip skip skip skip skip skip skip skip skip skip skip skip skip skip skip want=1 misses=3 pause=0
1/1            want=1 misses=0 pause=0
1/1            want=3 misses=0 pause=0
2/2            want=5 misses=0 pause=0
3/3            want=8 misses=0 pause=0
`
	var a Adapt
	for _, line := range strings.Split(strings.TrimSpace(trace), "\n") {
		f := strings.Fields(line)
		i := 0
		for ; i < len(f) && !strings.Contains(f[i], "="); i++ {
			switch f[i] {
			case "start":
			case "skip":
				a.Skip()
			default:
				var d, acc int
				if _, err := fmt.Sscanf(f[i], "%d/%d", &d, &acc); err != nil {
					t.Fatalf("%q: %v", line, err)
				}
				a.Verified(d, acc, max, cost)
			}
		}
		got := fmt.Sprintf("want=%d misses=%d pause=%d", a.Want(max, cost), a.Misses, a.Pause)
		if want := strings.Join(f[i:], " "); got != want {
			t.Fatalf("after %q (p %.3f): %s, want %s", strings.Join(f[:i], " "), a.p(), got, want)
		}
	}
}

// TestAdaptPauseIsBounded: however many misses, a pause never exceeds maxPause
// steps, so a sequence whose output starts repeating is drafted for again.
func TestAdaptPauseIsBounded(t *testing.T) {
	var a Adapt
	for range 100 {
		a.Pause = 0
		a.Verified(1, 0, 8, 0.15)
		if a.Pause > maxPause {
			t.Fatalf("pause %d", a.Pause)
		}
	}
	if a.Pause != maxPause {
		t.Fatalf("pause %d after 100 misses, want %d", a.Pause, maxPause)
	}
}

func FuzzLookup(f *testing.F) {
	f.Add([]byte{1, 2, 3, 1, 2}, 4)
	f.Fuzz(func(t *testing.T, b []byte, k int) {
		k %= 32
		seq := make([]int32, len(b))
		for i, x := range b {
			seq[i] = int32(x % 5)
		}
		got := Lookup(nil, seq, k)
		if len(got) > max(k, 0) {
			t.Fatalf("drafted %d > %d", len(got), k)
		}
		if len(got) == 0 {
			return
		}
		// The draft continues some earlier occurrence of a suffix of at least MinNGram tokens.
		for n := MinNGram; n <= MaxNGram && n < len(seq); n++ {
			for i := 0; i+n+len(got) <= len(seq) && i+n < len(seq); i++ {
				if slices.Equal(seq[i:i+n], seq[len(seq)-n:]) && slices.Equal(seq[i+n:i+n+len(got)], got) {
					return
				}
			}
		}
		t.Fatalf("draft %v of %v continues no earlier suffix occurrence", got, seq)
	})
}
