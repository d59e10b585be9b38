package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/internal/testenv"
)

// parityPieces are the bits the parity texts are made of: the pre-tokenizers'
// classes (letters, digits, punctuation, contractions, whitespace of every kind
// including non-ASCII), scripts the vocabularies treat apart (CJK, Hangul, Thai,
// Cyrillic, Greek letters that Unicode normalization would change), emoji with
// joiners, byte edge cases, '▁', and special-token texts.
var parityPieces = []string{
	" ", "  ", "\n", "\t", "\r\n", "   \n", "a", "Hello", "world", "it's", "'S", "'ll", "I'M",
	"123", "4567890", "١٢٣", "Ⅻ", "½", "é", "ö", "ø", "ñ", "日本語", "中文", "한국어", "ภาษาไทย",
	"Привет", "μ", "Ω", "\u1f7d", "\u212a", "🙂", "👍🏽", "👨\u200d👩\u200d👧", "!", "?!", "...", "$", "+=", "<",
	">", "|", "`", "~", "^", "#", "(", ")", "_", "-", "—", "«", "\u00a0", "\u3000", "\u2009",
	"\u0301", "\u200b", "\u2581", "\u1680", "\u2028", "\u0085", "\x00", "\x7f", "ＡＢＣ", "！",
	"。", "𐐀", "\U0001e900", "<|endoftext|>", "<s>", "</s>", "<unk>", "<|im_start|>", "<|im_end|>",
	"<|eot_id|>", "<|begin_of_text|>", "<|end|>", "<|user|>", "<think>",
}

// TestLlamaCppParity tokenizes a few hundred generated texts and the chat renderings
// in ../shared/testdata/chat-templates with every vocabulary,
// with and without special-token parsing, and compares the ids with llama.cpp's for
// the same GGUF (the peer in ../shared/peers/llamacpp, run through node). It needs
// node and the peer; -short skips it.
func TestLlamaCppParity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs llama.cpp through node")
	}
	shared := testenv.Shared(t)
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node (for the llama.cpp peer)", err)
	}
	setup := filepath.Join(shared, "peers", "llamacpp", "setup.sh")
	out, err := exec.Command("bash", setup).Output()
	if err != nil {
		testenv.Missing(t, "the llama.cpp peer ("+setup+")", err)
	}
	peerDir := strings.TrimSpace(string(out))

	rng := rand.New(rand.NewPCG(1, 2))
	texts := make([]string, 300)
	for i := range texts {
		var sb strings.Builder
		for n := 1 + rng.IntN(16); n > 0; n-- {
			sb.WriteString(parityPieces[rng.IntN(len(parityPieces))])
		}
		texts[i] = sb.String()
	}
	// Real prompts too: the chat renderings of Llama 3's and Qwen3's templates.
	for _, name := range []string{"llama3.json", "qwen3.json"} {
		raw, err := os.ReadFile(filepath.Join(shared, "testdata", "chat-templates", name))
		if err != nil {
			t.Fatal(err)
		}
		var file struct{ Cases []struct{ Expected string } }
		if err := json.Unmarshal(raw, &file); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, c := range file.Cases {
			texts = append(texts, c.Expected)
		}
	}
	inputs := filepath.Join(t.TempDir(), "inputs.json")
	b, err := json.Marshal(texts)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inputs, b, 0o644); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("testdata", "llamacpp_tokenize.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	common := filepath.Join(shared, "peers", "llamacpp", "common.mjs")

	dir := filepath.Join(shared, "testdata", "tokenizer")
	args := []string{script, peerDir, common, inputs}
	for _, name := range vectorVocabs {
		args = append(args, filepath.Join(dir, "ggml-vocab-"+name+".gguf"))
	}
	cmd := exec.Command(node, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("llama.cpp peer: %v\n%s", err, stderr.String())
	}
	var results map[string]struct{ Plain, Special [][]int32 }
	if err := json.Unmarshal(raw, &results); err != nil {
		t.Fatalf("llama.cpp peer output: %v\n%s", err, raw)
	}
	for _, name := range vectorVocabs {
		t.Run(name, func(t *testing.T) {
			model := filepath.Join(dir, "ggml-vocab-"+name+".gguf")
			want := results[model]
			if len(want.Plain) != len(texts) || len(want.Special) != len(texts) {
				t.Fatalf("llama.cpp peer gave %d and %d results for %d texts", len(want.Plain), len(want.Special), len(texts))
			}
			tok := cachedTokenizer(t, model)
			// Where a normal token only looks special (Qwen2's "</s>"), llama.cpp
			// parses it as a control token and lmlite does not (see
			// TestLooksSpecialStaysNormal): those texts are compared without parsing only.
			differ := looksSpecialNormal(t, model)
			bad, skipped := 0, 0
			for i, s := range texts {
				for _, c := range []struct {
					special bool
					want    []int32
				}{{false, want.Plain[i]}, {true, want.Special[i]}} {
					if c.special && slices.ContainsFunc(differ, func(w string) bool { return strings.Contains(s, w) }) {
						skipped++
						continue
					}
					if got := tok.Encode(s, false, c.special); fmtIDs(got) != fmtIDs(c.want) {
						if bad++; bad <= 10 {
							t.Errorf("Encode(%q, parseSpecial=%v)\n got %s\nwant %s (llama.cpp)", s, c.special, fmtIDs(got), fmtIDs(c.want))
						}
					}
				}
			}
			if bad > 10 {
				t.Errorf("%d encodings differ in all", bad)
			}
			if skipped > 0 {
				t.Logf("%d texts with %q compared without special-token parsing only", skipped, differ)
			}
		})
	}
}
