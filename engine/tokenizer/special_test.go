package tokenizer

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/lmlite/lmlite/engine/gguf"

	"github.com/lmlite/lmlite/internal/testenv"
)

// TestParseSpecial checks special-token parsing against llama.cpp's own output
// (llama_tokenize with parse_special, no BOS; computed with ../shared/peers/llamacpp):
// chat markup becomes control tokens, Phi-3's special tokens swallow the whitespace
// after them, SentencePiece prefixes a space after a special token, and a "</s>" is a
// control token where the vocabulary makes it control or user-defined (Phi-3,
// Llama 2). One case departs from llama.cpp on purpose: Qwen2's "</s>" is a normal
// token that only looks special, and stays text ("</", "s", ">"); llama.cpp makes it
// a control token (128247) because its text is on its end-of-generation list.
func TestParseSpecial(t *testing.T) {
	dir := testenv.SharedFile(t, "testdata/tokenizer")
	cases := []struct {
		vocab, text string
		want        []int32
	}{
		{"qwen2", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", []int32{151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198}},
		{"qwen2", "a</s>  b", []int32{64, 522, 82, 29, 220, 293}},
		{"qwen2", "text <think>x</think> more", []int32{1318, 220, 151667, 87, 151668, 803}},
		{"llama-bpe", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>", []int32{128000, 128006, 882, 128007, 271, 15339, 128009}},
		{"llama-bpe", "<|im_start|>user\nhi", []int32{27, 91, 318, 5011, 91, 29, 882, 198, 6151}},
		{"phi-3", "<|user|>\n  hello <|end|>\n<|assistant|>", []int32{32010, 22172, 29871, 32007, 32001}},
		{"phi-3", "a</s>  b", []int32{263, 2, 289}},
		{"llama-spm", "<s>[INST] hi [/INST]", []int32{1, 518, 25580, 29962, 7251, 518, 29914, 25580, 29962}},
		{"llama-spm", "a</s>  b", []int32{263, 2, 259, 289}},
	}
	for _, c := range cases {
		tok := cachedTokenizer(t, filepath.Join(dir, "ggml-vocab-"+c.vocab+".gguf"))
		if got := tok.Encode(c.text, false, true); fmtIDs(got) != fmtIDs(c.want) {
			t.Errorf("%s: Encode(%q, parseSpecial)\n got %s\nwant %s", c.vocab, c.text, fmtIDs(got), fmtIDs(c.want))
		}
	}
}

// TestSpecialIDs checks BOS/EOS/EOT, end of generation and add_bos for the real
// vocabularies, as llama.cpp's loader decides them.
func TestSpecialIDs(t *testing.T) {
	dir := testenv.SharedFile(t, "testdata/tokenizer")
	cases := []struct {
		vocab         string
		bos, eos, eot int32
		addBOS        bool
		eog           []string
	}{
		{"llama-spm", 1, 2, -1, true, []string{"</s>"}},
		{"llama-bpe", 128000, 128001, 128009, true, []string{"<|end_of_text|>", "<|eot_id|>"}},
		{"qwen2", -1, 151645, 151645, false, []string{"<|im_end|>", "<|endoftext|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}},
		{"phi-3", 1, 32000, 32007, true, []string{"<|endoftext|>", "<|end|>"}},
		{"gpt-2", 50256, 50256, 50256, false, []string{"<|endoftext|>"}},
	}
	for _, c := range cases {
		tok := cachedTokenizer(t, filepath.Join(dir, "ggml-vocab-"+c.vocab+".gguf"))
		if tok.BOS() != c.bos || tok.EOS() != c.eos || tok.EOT() != c.eot || tok.AddBOS() != c.addBOS {
			t.Errorf("%s: BOS %d EOS %d EOT %d AddBOS %v, want %d %d %d %v", c.vocab,
				tok.BOS(), tok.EOS(), tok.EOT(), tok.AddBOS(), c.bos, c.eos, c.eot, c.addBOS)
		}
		for _, w := range c.eog {
			id, ok := tok.ID(w)
			if !ok || !tok.IsEOG(id) {
				t.Errorf("%s: %q (%d, %v) is not end of generation", c.vocab, w, id, ok)
			}
		}
		if id, _ := tok.ID("Hello"); tok.IsEOG(id) {
			t.Errorf("%s: Hello ends generation", c.vocab)
		}
	}
}

// TestLooksSpecialStaysNormal: in every vocabulary of ../shared, a token whose type
// is normal in the file stays normal, even when its text is one that llama.cpp takes
// for a special token ("</s>", "<|endoftext|>" ...): special-token parsing leaves
// such a text alone, so it encodes as it does without parsing. Tokens the file makes
// user-defined and llama.cpp makes control by their text (fill-in-the-middle tokens)
// become control tokens, as in llama.cpp.
func TestLooksSpecialStaysNormal(t *testing.T) {
	dir := testenv.SharedFile(t, "testdata/tokenizer")
	checked := 0
	for _, name := range vectorVocabs {
		path := filepath.Join(dir, "ggml-vocab-"+name+".gguf")
		tok := cachedTokenizer(t, path)
		declared := declaredTypes(t, path)
		for i, ty := range declared {
			id := int32(i)
			if ty == TypeNormal && tok.Type(id) != TypeNormal {
				t.Errorf("%s: token %d %q is normal in the file, %d here", name, id, tok.TokenText(id), tok.Type(id))
			}
			if ty == TypeUserDefined && slices.Contains(detectedTexts(), tok.TokenText(id)) && tok.Type(id) != TypeControl {
				t.Errorf("%s: user-defined token %d %q is not a control token", name, id, tok.TokenText(id))
			}
		}
		for _, w := range looksSpecialNormal(t, path) {
			checked++
			for _, text := range []string{w, "a" + w + "  b", w + w} {
				if got, want := tok.Encode(text, false, true), tok.Encode(text, false, false); fmtIDs(got) != fmtIDs(want) {
					t.Errorf("%s: Encode(%q) with special tokens %s, without %s", name, text, fmtIDs(got), fmtIDs(want))
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no vocabulary has a normal token that looks special (Qwen2's </s> was expected)")
	}
}

// detectedTexts are the texts llama.cpp's loader takes for special tokens.
func detectedTexts() []string {
	var all []string
	for _, l := range [][]string{eotTexts, eomTexts, fimPreTexts, fimSufTexts, fimMidTexts, fimPadTexts, fimRepTexts, fimSepTexts, eogTexts} {
		all = append(all, l...)
	}
	return all
}

// declaredTypes reads the token types a GGUF vocabulary file gives.
func declaredTypes(t *testing.T, path string) []TokenType {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, ok := f.Get("tokenizer.ggml.token_type")
	if !ok {
		return nil
	}
	ts, ok := v.Int32s()
	if !ok {
		t.Fatalf("%s: token types are not int32s", path)
	}
	out := make([]TokenType, len(ts))
	for i, ty := range ts {
		out[i] = TokenType(ty)
	}
	return out
}

// looksSpecialNormal lists the texts of the tokens a vocabulary file declares normal
// that llama.cpp makes control tokens by their text.
func looksSpecialNormal(t *testing.T, path string) []string {
	t.Helper()
	tok := cachedTokenizer(t, path)
	declared := declaredTypes(t, path)
	var out []string
	for _, w := range detectedTexts() {
		if id, ok := tok.ID(w); ok && declared != nil && declared[id] == TypeNormal && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}
