package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/internal/testenv"
)

// The vocabularies of llama.cpp's test-tokenizer-0 vectors in ../shared.
var vectorVocabs = []string{
	"llama-spm", "llama-bpe", "qwen2", "phi-3", "gpt-2", "deepseek-coder",
	"deepseek-llm", "falcon", "mpt", "refact", "starcoder",
}

// TestVectorVocabsAreEveryVocabulary: vectorVocabs, the list the vector, parity
// and special-token tests walk, is every vocabulary in ../shared/testdata/tokenizer,
// so that one added there is not silently left unchecked.
func TestVectorVocabsAreEveryVocabulary(t *testing.T) {
	dir := testenv.SharedFile(t, "testdata/tokenizer")
	files, err := filepath.Glob(filepath.Join(dir, "ggml-vocab-*.gguf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vocabularies in %s: %v", dir, err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "ggml-vocab-"), ".gguf"))
	}
	want := slices.Sorted(slices.Values(names))
	got := slices.Sorted(slices.Values(vectorVocabs))
	if !slices.Equal(got, want) {
		t.Errorf("vectorVocabs %v, the directory holds %v", got, want)
	}
}

// loaded caches the tokenizers the tests build from ../shared, so that each large
// vocabulary is read once per test binary (a Tokenizer is immutable).
var loaded sync.Map // path -> *Tokenizer

func cachedTokenizer(t testing.TB, path string) *Tokenizer {
	t.Helper()
	if tok, ok := loaded.Load(path); ok {
		return tok.(*Tokenizer)
	}
	tok := openTokenizer(t, path)
	loaded.Store(path, tok)
	return tok
}

func openTokenizer(t testing.TB, path string) *Tokenizer {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := FromGGUF(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tok
}

// readVectors reads NAME.gguf.inp and NAME.gguf.out in test-tokenizer-0's format: the
// inputs are separated by "\n__ggml_vocab_test__\n" (each input is followed by one,
// so an input may itself be empty or end in newlines), and the outputs are one line
// of space-separated ids per input.
func readVectors(t *testing.T, base string) (inputs []string, want [][]int32) {
	t.Helper()
	inp, err := os.ReadFile(base + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(base + ".out")
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	rest := string(inp)
	for {
		i := strings.Index(rest, sep)
		if i < 0 {
			break
		}
		inputs = append(inputs, rest[:i])
		rest = rest[i+len(sep):]
	}
	if rest != "" {
		t.Fatalf("%s.inp: %q after the last separator", base, rest)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	for n, line := range lines {
		var ids []int32
		for _, f := range strings.Fields(line) {
			v, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				t.Fatalf("%s.out line %d: %v", base, n+1, err)
			}
			ids = append(ids, int32(v))
		}
		want = append(want, ids)
	}
	if len(inputs) != len(want) {
		t.Fatalf("%s: %d inputs but %d output lines", base, len(inputs), len(want))
	}
	return inputs, want
}

func fmtIDs(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return "[" + strings.Join(s, " ") + "]"
}

// TestVectors runs llama.cpp's tokenizer test vectors for every vocabulary and
// reports each line that differs; decoding the ids must give the input back (the
// byte-level vocabularies and SentencePiece both round-trip these inputs).
func TestVectors(t *testing.T) {
	dir := testenv.SharedFile(t, "testdata/tokenizer")
	for _, name := range vectorVocabs {
		t.Run(name, func(t *testing.T) {
			base := filepath.Join(dir, "ggml-vocab-"+name+".gguf")
			tok := cachedTokenizer(t, base)
			inputs, want := readVectors(t, base)
			t.Logf("%d vectors", len(inputs))
			for i, in := range inputs {
				got := tok.Encode(in, false, false)
				if fmtIDs(got) != fmtIDs(want[i]) {
					t.Errorf("line %d: Encode(%q)\n got %s\nwant %s", i+1, in, fmtIDs(got), fmtIDs(want[i]))
					continue
				}
				if dec := tok.Decode(got); dec != in && utf8.ValidString(in) {
					t.Errorf("line %d: Decode(Encode(%q)) = %q", i+1, in, dec)
				}
			}
		})
	}
}
