package tokenizer

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/lmlite/lmlite/engine/gguf"
)

// Small vocabularies built in the tests, written as GGUF metadata and read back with
// FromGGUF, so that the tests and the fuzz targets need nothing from ../shared.

// ggufBytes is a GGUF file holding only the metadata kvs.
func ggufBytes(t testing.TB, kvs []gguf.KV) []byte {
	t.Helper()
	w := gguf.NewWriter()
	for _, kv := range kvs {
		w.AddKV(kv.Key, kv.Value)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func fromKVs(t testing.TB, kvs []gguf.KV) *Tokenizer {
	t.Helper()
	f, err := gguf.Parse(ggufBytes(t, kvs))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// testSPM is a SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, a
// control and a user-defined token, and a few scored pieces.
func testSPM(t testing.TB) *Tokenizer { return fromKVs(t, testSPMKVs()) }

func testSPMKVs() []gguf.KV {
	tokens := []string{"<unk>", "<s>", "</s>"}
	types := []int32{2, 3, 3}
	scores := []float32{0, 0, 0}
	for b := 0; b < 256; b++ {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, 6)
		scores = append(scores, 0)
	}
	tokens = append(tokens, "<|ctl|>", "<user>")
	types = append(types, 3, 4)
	scores = append(scores, 0, 0)
	pieces := []string{"▁", "e", "o", "n", "c", "a", "t", "i", "m", "u", "p", "h", "l", "w", "r", "d",
		"on", "ce", "▁t", "▁a", "▁o", "▁u", "up", "▁up", "▁upon", "im", "▁tim", "▁time", "▁once", "nce",
		"▁▁", "ll", "he", "▁he", "▁hell", "ö", "日", "本"}
	for i, p := range pieces {
		tokens = append(tokens, p)
		types = append(types, 1)
		scores = append(scores, -float32(i)) // earlier pieces merge first
	}
	return []gguf.KV{
		{Key: "general.architecture", Value: gguf.String("llama")},
		{Key: "tokenizer.ggml.model", Value: gguf.String("llama")},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Strings(tokens)},
		{Key: "tokenizer.ggml.scores", Value: gguf.Float32s(scores)},
		{Key: "tokenizer.ggml.token_type", Value: gguf.Int32s(types)},
		{Key: "tokenizer.ggml.bos_token_id", Value: gguf.Uint32(1)},
		{Key: "tokenizer.ggml.eos_token_id", Value: gguf.Uint32(2)},
		{Key: "tokenizer.ggml.unknown_token_id", Value: gguf.Uint32(0)},
	}
}

// testBPE is a byte-level BPE vocabulary with the GPT-2 pre-tokenizer: the 256 byte
// characters, a few merges, a control and a user-defined token.
func testBPE(t testing.TB) *Tokenizer { return fromKVs(t, testBPEKVs()) }

func testBPEKVs() []gguf.KV {
	var tokens []string
	var types []int32
	for b := 0; b < 256; b++ {
		tokens = append(tokens, string(byteToRune[b]))
		types = append(types, 1)
	}
	merges := []string{"Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "Ã ¶"}
	for _, m := range merges {
		var l, r string
		fmt.Sscanf(m, "%s %s", &l, &r)
		tokens = append(tokens, l+r)
		types = append(types, 1)
	}
	tokens = append(tokens, "<|endoftext|>", "<user>")
	types = append(types, 3, 4)
	return []gguf.KV{
		{Key: "general.architecture", Value: gguf.String("gpt2")},
		{Key: "tokenizer.ggml.model", Value: gguf.String("gpt2")},
		{Key: "tokenizer.ggml.pre", Value: gguf.String("gpt-2")},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Strings(tokens)},
		{Key: "tokenizer.ggml.token_type", Value: gguf.Int32s(types)},
		{Key: "tokenizer.ggml.merges", Value: gguf.Strings(merges)},
		{Key: "tokenizer.ggml.bos_token_id", Value: gguf.Uint32(uint32(len(tokens) - 2))},
		{Key: "tokenizer.ggml.eos_token_id", Value: gguf.Uint32(uint32(len(tokens) - 2))},
	}
}
