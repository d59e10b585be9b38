package model

import (
	"errors"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/internal/testenv"
)

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// TestStories260KGreedy runs the real stories260K model greedily from BOS and checks
// the 199 generated ids against llama2.c's expectation.
func TestStories260KGreedy(t *testing.T) {
	path := testenv.SharedFile(t, "models/stories260K.gguf")
	raw, err := os.ReadFile(testenv.SharedFile(t, "models/stories260K.expected-greedy-200.ids.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var want []int32
	for _, f := range strings.Fields(string(raw)) {
		id, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, int32(id))
	}
	m, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := m.Config()
	if c.Arch != "llama" || c.Dim != 64 || c.Layers != 5 || c.Heads != 8 || c.KVHeads != 4 || c.Vocab != 512 || c.Context != 512 {
		t.Fatalf("config %+v", c)
	}
	st := m.NewState(0)
	tok := int32(1)
	var got []int32
	for range want {
		logits, err := st.Forward([]int32{tok}, false)
		if err != nil {
			t.Fatal(err)
		}
		tok = argmax(logits)
		got = append(got, tok)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("step %d: got %d, want %d\ngot  %v\nwant %v", i, got[i], want[i], got, want)
		}
	}

	// Teacher forcing the whole sequence as one batch gives the same bits as the
	// token-by-token run did.
	seq := append([]int32{1}, want[:len(want)-1]...)
	all, err := m.NewState(0).Forward(seq, true)
	if err != nil {
		t.Fatal(err)
	}
	st2 := m.NewState(0)
	for i, tk := range seq[:20] {
		one, err := st2.Forward([]int32{tk}, false)
		if err != nil {
			t.Fatal(err)
		}
		for j := range one {
			if math.Float32bits(one[j]) != math.Float32bits(all[i*c.Vocab+j]) {
				t.Fatalf("token %d logit %d: alone %v, in batch %v", i, j, one[j], all[i*c.Vocab+j])
			}
		}
	}
	for i := range seq {
		if a := argmax(all[i*c.Vocab : (i+1)*c.Vocab]); a != want[i] {
			t.Fatalf("batched step %d: argmax %d, want %d", i, a, want[i])
		}
	}

	// The context is enforced.
	if _, err := m.NewState(8).Forward(make([]int32, 9), false); !errors.Is(err, ErrContextFull) {
		t.Fatalf("9 tokens in a context of 8: %v", err)
	}
	if _, err := m.NewState(0).Forward([]int32{512}, false); !errors.Is(err, ErrBadToken) {
		t.Fatalf("token 512: %v", err)
	}
}

// TestLlama2TinyRandom loads an F16 model with the full Llama 2 vocabulary and runs it.
func TestLlama2TinyRandom(t *testing.T) {
	m, err := Open(testenv.SharedFile(t, "models/llama-2-tiny-random.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := m.Config()
	if c.Vocab != 32000 || c.Dim != 8 || c.Layers != 1 {
		t.Fatalf("config %+v", c)
	}
	t.Logf("config %+v", c)
	logits, err := m.NewState(64).Forward([]int32{1, 15043, 3186}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(logits) != 3*32000 {
		t.Fatalf("%d logits", len(logits))
	}
	for _, v := range logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatal("non-finite logit")
		}
	}
}
