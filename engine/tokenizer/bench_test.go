package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lmlite/lmlite/internal/testenv"
)

// benchText is about 10 KB of mixed text: the test vectors' inputs (prose, code,
// whitespace runs, emoji, CJK) repeated.
func benchText(b testing.TB, dir string) string {
	raw, err := os.ReadFile(filepath.Join(dir, "ggml-vocab-llama-bpe.gguf.inp"))
	if err != nil {
		b.Fatal(err)
	}
	s := strings.ReplaceAll(string(raw), "\n__ggml_vocab_test__\n", " ")
	var sb strings.Builder
	for sb.Len() < 10_000 {
		sb.WriteString(s)
	}
	n := 10_000
	for !utf8.RuneStart(sb.String()[n]) {
		n--
	}
	return sb.String()[:n]
}

// BenchmarkEncode10KB encodes a 10 KB text with each vocabulary kind.
func BenchmarkEncode10KB(b *testing.B) {
	dir := testenv.SharedFile(b, "testdata/tokenizer")
	text := benchText(b, dir)
	for _, name := range []string{"llama-spm", "llama-bpe", "qwen2", "gpt-2", "deepseek-llm"} {
		tok := openTokenizer(b, filepath.Join(dir, "ggml-vocab-"+name+".gguf"))
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				tok.Encode(text, true, false)
			}
		})
	}
}

// BenchmarkDecodeStream decodes the tokens of a 10 KB text one id at a time.
func BenchmarkDecodeStream(b *testing.B) {
	dir := testenv.SharedFile(b, "testdata/tokenizer")
	text := benchText(b, dir)
	tok := openTokenizer(b, filepath.Join(dir, "ggml-vocab-llama-bpe.gguf"))
	ids := tok.Encode(text, false, false)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		d := tok.NewDecoder()
		for _, id := range ids {
			d.Next(id)
		}
		d.Flush()
	}
}

// BenchmarkLoad builds the Llama 3 tokenizer (128K tokens, 280K merges) from GGUF.
func BenchmarkLoad(b *testing.B) {
	p := filepath.Join(testenv.SharedFile(b, "testdata/tokenizer"), "ggml-vocab-llama-bpe.gguf")
	b.ReportAllocs()
	for b.Loop() {
		openTokenizer(b, p)
	}
}
