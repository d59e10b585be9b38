package tokenizer

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/internal/testenv"
)

// fuzzVocabs are the vocabularies the fuzz target runs: the two built in the test,
// and stories260K's real 512-token SentencePiece vocabulary when ../shared has it.
func fuzzVocabs(f *testing.F) map[string]*Tokenizer {
	v := map[string]*Tokenizer{"spm": testSPM(f), "bpe": testBPE(f)}
	p := filepath.Join(testenv.RepoRoot(f), "..", "shared", "models", "stories260K.gguf")
	if g, err := gguf.Open(p); err == nil {
		if tok, err := FromGGUF(g); err == nil {
			v["stories260K"] = tok
		}
		g.Close()
	}
	return v
}

// FuzzEncodeDecode throws arbitrary text at Encode and the decoders: nothing panics,
// every id is in range, the stream decoder agrees with Decode and never emits part of
// a character when the text is valid UTF-8, and decoding gives the text back where
// the tokenizer guarantees it: byte-level BPE always (invalid bytes come back as
// U+FFFD, which is what its pre-tokenizer sees); SentencePiece with byte fallback
// when the text is valid UTF-8 (llama.cpp measures a character by its first byte, so
// a stray byte swallows what follows), has no '▁' (it stands for the space) and no
// user-defined token text (a space prefix follows special tokens).
func FuzzEncodeDecode(f *testing.F) {
	vocabs := fuzzVocabs(f)
	for _, s := range []string{
		"", " ", "hello world", "Once upon a time", "  leading\n\n\ttabs", "héllo wörld 日本",
		"🙂 emoji", "<|endoftext|> and <user> and <|ctl|>", "it's 1234567 o'clock", "\xff\xfe bad",
		"a\u0301", "▁", "x<s>y</s>", "\r\n\r\n   \n",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, parseSpecial bool) {
		for name, tok := range vocabs {
			ids := tok.Encode(s, true, parseSpecial)
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("%s: Encode(%q) gave id %d of %d", name, s, id, tok.VocabSize())
				}
			}
			// EncodeCapped is Encode within its limit and "over" past it, never early.
			for _, limit := range []int{len(ids) - 1, len(ids)} {
				if limit < 1 {
					continue
				}
				got, over := tok.EncodeCapped(s, true, parseSpecial, limit)
				if over != (len(ids) > limit) || (!over && !slices.Equal(got, ids)) {
					t.Fatalf("%s: EncodeCapped(%q, %d) = %v, %v; Encode has %d tokens", name, s, limit, got, over, len(ids))
				}
			}
			d := tok.NewDecoder()
			var sb strings.Builder
			for _, id := range ids {
				p := d.Next(id)
				if utf8.ValidString(s) && !parseSpecial && !utf8.ValidString(p) {
					t.Fatalf("%s: piece %q of %q is not whole UTF-8", name, p, s)
				}
				sb.WriteString(p)
			}
			sb.WriteString(d.Flush())
			dec := tok.Decode(ids)
			if sb.String() != dec {
				t.Fatalf("%s: stream decode %q != Decode %q", name, sb.String(), dec)
			}
			if parseSpecial {
				continue // control tokens decode to nothing
			}
			switch tok.kind {
			case kindBPE:
				if want := string([]rune(s)); dec != want {
					t.Fatalf("%s: Decode(Encode(%q)) = %q", name, s, dec)
				}
			case kindSPM:
				if !utf8.ValidString(s) || strings.Contains(s, "▁") || tok.hasUserDefinedText(s) {
					continue
				}
				if dec != s {
					t.Fatalf("%s: Decode(Encode(%q)) = %q", name, s, dec)
				}
			}
		}
	})
}

// hasUserDefinedText reports whether s contains the text of a user-defined token.
func (t *Tokenizer) hasUserDefinedText(s string) bool {
	for _, id := range t.specialUser.order {
		if strings.Contains(s, t.texts[id]) {
			return true
		}
	}
	return false
}

// FuzzFromGGUF feeds arbitrary bytes through gguf.Parse and FromGGUF: whatever
// metadata a file carries, building a tokenizer fails with an error or gives one that
// encodes (plain, parsing special tokens, and quoted) and decodes without panicking.
// It is seeded with the vocabularies built in the tests and damaged copies of them.
func FuzzFromGGUF(f *testing.F) {
	for _, kvs := range [][]gguf.KV{testSPMKVs(), testBPEKVs()} {
		b := ggufBytes(f, kvs)
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := gguf.Parse(b)
		if err != nil {
			return
		}
		tok, err := FromGGUF(g)
		if err != nil {
			return
		}
		for _, s := range []string{"", "hello world", " <s>\xff日本 🙂 </s> <|endoftext|>"} {
			for _, special := range []bool{false, true} {
				ids := tok.Encode(s, true, special)
				for _, id := range ids {
					if id < 0 || int(id) >= tok.VocabSize() {
						t.Fatalf("Encode(%q) gave id %d of %d", s, id, tok.VocabSize())
					}
				}
				tok.Decode(ids)
			}
			if q, err := tok.NewQuoter(s); err == nil {
				for _, id := range q.Encode("<s>"+q.Quote(s)+"</s>", true) {
					if id < 0 || int(id) >= tok.VocabSize() {
						t.Fatalf("quoted %q gave id %d of %d", s, id, tok.VocabSize())
					}
				}
			}
		}
		tok.Decode([]int32{-1, 0, int32(tok.VocabSize()), 1 << 30})
	})
}

// FuzzQuote: any text, quoted and encoded as a quoted prompt, gives the tokens of the
// text without special tokens (the marks never reach the output), and quoting adds
// nothing but marks.
func FuzzQuote(f *testing.F) {
	vocabs := fuzzVocabs(f)
	for _, s := range []string{"", "hello", "<|endoftext|>", "a<|endoftext|>b<s>c</s>", "<|endof", "text|>", "<|ctl|><user>",
		"\U000F0000<s>", "\xf3\xb0\x80", "</s\xff>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, tok := range vocabs {
			q, err := tok.NewQuoter(s)
			if err != nil {
				t.Fatal(err)
			}
			quoted := q.Quote(s)
			if strings.ReplaceAll(quoted, q.Mark(), "") != s {
				t.Fatalf("%s: Quote(%q) = %q: more than marks added", name, s, quoted)
			}
			if got, want := q.Encode(quoted, false), tok.Encode(s, false, false); fmtIDs(got) != fmtIDs(want) {
				t.Fatalf("%s: %q quoted gives %v, plain %v", name, s, got, want)
			}
		}
	})
}
