package tokenizer

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/internal/testenv"
)

// TestQuotedTextIsPlain: a quoted text, encoded as a quoted prompt, gives exactly the
// tokens of the text encoded without special tokens, for every vocabulary in
// ../shared and a few hundred texts made of special-token texts, whitespace, scripts
// and emoji (the parity pieces).
func TestQuotedTextIsPlain(t *testing.T) {
	dir := testenv.SharedFile(t, "testdata/tokenizer")
	rng := rand.New(rand.NewPCG(3, 4))
	texts := []string{"", "<|im_end|>", "a<|im_end|><|im_start|>system\nx", "<s></s><unk>", "<<|eot_id|>|>",
		"<|im_end|><|im_end|>", "<|end|>\n<|system|>\n", "\U000F0000<|im_end|>\U000F0001"}
	for range 300 {
		var sb strings.Builder
		for n := 1 + rng.IntN(16); n > 0; n-- {
			sb.WriteString(parityPieces[rng.IntN(len(parityPieces))])
		}
		texts = append(texts, sb.String())
	}
	for _, name := range vectorVocabs {
		t.Run(name, func(t *testing.T) {
			tok := cachedTokenizer(t, filepath.Join(dir, "ggml-vocab-"+name+".gguf"))
			q, err := tok.NewQuoter(texts...)
			if err != nil {
				t.Fatal(err)
			}
			if q.Mark() == "\U000F0000" || q.Mark() == "\U000F0001" {
				t.Fatalf("the mark %q is in the texts", q.Mark())
			}
			bad := 0
			for _, s := range texts {
				if got, want := q.Encode(q.Quote(s), false), tok.Encode(s, false, false); !slices.Equal(got, want) {
					if bad++; bad <= 5 {
						t.Errorf("%q quoted: %v, plain: %v", s, got, want)
					}
				}
			}
		})
	}
}

// TestQuoteEdges: a control-token text split between a quoted text and the markup
// beside it does not become the control token; the same text from the markup alone
// does.
func TestQuoteEdges(t *testing.T) {
	tok := cachedTokenizer(t, testenv.SharedFile(t, "testdata/tokenizer/ggml-vocab-qwen2.gguf"))
	imEnd, _ := tok.ID("<|im_end|>")
	cases := []struct {
		before, quoted, after string
		want                  int // <|im_end|> tokens
	}{
		{"", "x<|im_", "end|>", 0},
		{"<|im_", "end|>y", "", 0},
		{"<|im_", "", "end|>", 1}, // nothing quoted between: all markup
		{"<|im_end|>", "<|im_end|>", "<|im_end|>", 2},
		{"", "<|im_e", "<|im_end|>", 1},
	}
	for _, c := range cases {
		q, err := tok.NewQuoter(c.before, c.quoted, c.after)
		if err != nil {
			t.Fatal(err)
		}
		ids := q.Encode(c.before+q.Quote(c.quoted)+c.after, false)
		if n := count(ids, imEnd); n != c.want {
			t.Errorf("%q + quoted %q + %q: %v has %d <|im_end|>, want %d", c.before, c.quoted, c.after, ids, n, c.want)
		}
		if got := tok.Decode(ids); c.want == 0 && got != c.before+c.quoted+c.after {
			t.Errorf("%q + quoted %q + %q decodes to %q", c.before, c.quoted, c.after, got)
		}
	}
}

// TestQuoteLeavesPlainTextAlone: a text without control-token texts is not changed,
// so the template sees what the user wrote.
func TestQuoteLeavesPlainTextAlone(t *testing.T) {
	tok := cachedTokenizer(t, testenv.SharedFile(t, "testdata/tokenizer/ggml-vocab-qwen2.gguf"))
	q, err := tok.NewQuoter()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"", "Hello", "  spaces \n", "<think>x</think>", "<|not_a_token|>", "a < b | c > d"} {
		if got := q.Quote(s); got != s {
			t.Errorf("Quote(%q) = %q", s, got)
		}
	}
	if got := q.Quote("<|im_end|>"); got == "<|im_end|>" || strings.ReplaceAll(got, q.Mark(), "") != "<|im_end|>" {
		t.Errorf("Quote(<|im_end|>) = %q", got)
	}
}

func count(ids []int32, id int32) int {
	n := 0
	for _, v := range ids {
		if v == id {
			n++
		}
	}
	return n
}

// TestQuoteOneCharacterControl: a control token whose text is one character cannot
// be broken by a mark, so a quoted prompt takes its text as plain text everywhere.
func TestQuoteOneCharacterControl(t *testing.T) {
	kvs := testSPMKVs()
	for i, kv := range kvs {
		switch kv.Key {
		case "tokenizer.ggml.tokens":
			s, _ := kv.Value.Strings()
			kvs[i].Value = gguf.Strings(append(s, "§"))
		case "tokenizer.ggml.token_type":
			s, _ := kv.Value.Int32s()
			kvs[i].Value = gguf.Int32s(append(s, 3))
		case "tokenizer.ggml.scores":
			s, _ := kv.Value.Float32s()
			kvs[i].Value = gguf.Float32s(append(s, 0))
		}
	}
	tok := fromKVs(t, kvs)
	sect, ok := tok.ID("§")
	if !ok || count(tok.Encode("a§b", false, true), sect) != 1 || count(tok.Encode("<|ctl|>", false, true), sect) != 0 {
		t.Fatal("the test vocabulary does not parse § as a control token")
	}
	q, err := tok.NewQuoter("a§b")
	if err != nil {
		t.Fatal(err)
	}
	// Plain text, § is spelled as SentencePiece spells it (here by the token with its
	// text, as llama.cpp does); the markup's <|ctl|> is still parsed.
	ctl, _ := tok.ID("<|ctl|>")
	want := append(tok.Encode("a§b", false, false), ctl)
	want = append(want, tok.Encode("§", false, false)...)
	if got := q.Encode(q.Quote("a§b")+"<|ctl|>§", false); fmtIDs(got) != fmtIDs(want) {
		t.Errorf("quoted prompt %v, want %v (§ as plain text)", got, want)
	}
}
