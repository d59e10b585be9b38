package tokenizer

import (
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/internal/testenv"
)

// TestEncodeCappedIsEncodeWithinLimit: for every vocabulary, on the test vectors'
// inputs and a longer mixed text, EncodeCapped gives Encode's tokens when they are
// at most limit and says "over" exactly when they are more, with and without
// special tokens, at the limits around the true count.
func TestEncodeCappedIsEncodeWithinLimit(t *testing.T) {
	dir := testenv.SharedFile(t, "testdata/tokenizer")
	for _, name := range vectorVocabs {
		tok := cachedTokenizer(t, filepath.Join(dir, "ggml-vocab-"+name+".gguf"))
		inputs, _ := readVectors(t, filepath.Join(dir, "ggml-vocab-"+name+".gguf"))
		inputs = append(inputs, benchText(t, dir), "<|im_start|>user\n<s>hi</s>"+strings.Repeat(" \n\t", 40))
		for _, text := range inputs {
			for _, special := range []bool{false, true} {
				want := tok.Encode(text, tok.AddBOS(), special)
				n := len(want)
				for _, limit := range []int{1, n / 2, n - 1, n, n + 1, 4 * n} {
					if limit < 1 {
						continue
					}
					got, over := tok.EncodeCapped(text, tok.AddBOS(), special, limit)
					if over != (n > limit) {
						t.Fatalf("%s %q special=%v: %d tokens, limit %d: over=%v", name, text, special, n, limit, over)
					}
					if !over && !slices.Equal(got, want) {
						t.Fatalf("%s %q special=%v limit %d: %v, Encode %v", name, text, special, limit, got, want)
					}
				}
			}
		}
	}
}

// TestEncodeCappedStopsEarly: a text far over the limit costs about the limit's
// work, not the text's. A megabyte is refused from its length alone, before any
// work; a text the length allows but whose words pass the limit stops after them
// (byte-level BPE encodes word by word; each word costs a few allocations).
func TestEncodeCappedStopsEarly(t *testing.T) {
	dir := testenv.SharedFile(t, "testdata/tokenizer")
	tok := cachedTokenizer(t, filepath.Join(dir, "ggml-vocab-llama-bpe.gguf"))
	if !tok.bounded {
		t.Fatal("llama-bpe: every byte should end up in a token")
	}
	const limit = 100
	huge := strings.Repeat("hello world ", 1<<20/12)
	if allocs := testing.AllocsPerRun(3, func() {
		if _, over := tok.EncodeCapped(huge, true, true, limit); !over {
			t.Fatal("a megabyte is not over 100 tokens")
		}
	}); allocs > 2 {
		t.Errorf("refusing a megabyte made %v allocations; want none of the encoding's", allocs)
	}

	// Within the length bound (limit × the longest token), but ~20× over the limit.
	words := strings.Repeat("ab ", limit*tok.maxTokenBytes/3)
	n := len(tok.Encode(words, true, true))
	if n < 10*limit {
		t.Fatalf("the text is %d tokens; the test wants ≥ %d", n, 10*limit)
	}
	full := testing.AllocsPerRun(3, func() { tok.Encode(words, true, true) })
	capped := testing.AllocsPerRun(3, func() {
		if _, over := tok.EncodeCapped(words, true, true, limit); !over {
			t.Fatal("not over")
		}
	})
	// Encode allocates per word: ~n of them. Capped stops past limit tokens.
	if capped > 4*limit+20 || capped*5 > full {
		t.Errorf("%d tokens, limit %d: EncodeCapped made %v allocations, Encode %v: it did not stop early", n, limit, capped, full)
	}
}

// TestBoundedVocabularies: which test vocabularies allow the length bound. Phi-3's
// special tokens swallow the whitespace after them (rstrip), so its whole text's
// length says nothing, but a raw fragment's does (rawBounded).
func TestBoundedVocabularies(t *testing.T) {
	dir := testenv.SharedFile(t, "testdata/tokenizer")
	for _, name := range vectorVocabs {
		tok := cachedTokenizer(t, filepath.Join(dir, "ggml-vocab-"+name+".gguf"))
		t.Logf("%s: bounded %v, longest token %d bytes", name, tok.bounded, tok.maxTokenBytes)
		if name == "phi-3" && tok.bounded {
			t.Errorf("phi-3 has rstrip tokens: not bounded")
		}
		if tok.bounded && !tok.rawBounded {
			t.Errorf("%s: bounded but not rawBounded", name)
		}
	}
	if !testSPM(t).bounded {
		t.Errorf("the test SentencePiece vocabulary has every byte token: bounded")
	}
}

// TestEncodeCappedRefusesAnOversizedFragmentUnread: Phi-3 (SentencePiece, whose
// special tokens' strip attributes rule out the whole text's length bound) refuses a
// megabyte of plain text against 4,096 tokens from the fragment's length, before
// SentencePiece's merges run over it: the refusal allocates a few kilobytes, not the
// megabyte's symbols. (Before the fragment's bound, it merged the whole megabyte:
// over a minute under the race detector in engine's TestChatTokensCapped.)
func TestEncodeCappedRefusesAnOversizedFragmentUnread(t *testing.T) {
	dir := testenv.SharedFile(t, "testdata/tokenizer")
	tok := cachedTokenizer(t, filepath.Join(dir, "ggml-vocab-phi-3.gguf"))
	if tok.bounded || !tok.rawBounded {
		t.Fatalf("phi-3: bounded %v, rawBounded %v; want false, true", tok.bounded, tok.rawBounded)
	}
	huge := strings.Repeat("many words here ", 1<<20/16)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, over := tok.EncodeCapped(huge, true, false, 4096)
	runtime.ReadMemStats(&after)
	if !over {
		t.Fatal("a megabyte is not over 4096 tokens")
	}
	if b := after.TotalAlloc - before.TotalAlloc; b > 256<<10 {
		t.Errorf("refusing a megabyte allocated %d bytes: the fragment was encoded", b)
	}
}
