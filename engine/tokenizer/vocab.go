package tokenizer

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrInvalid is wrapped by every error about vocabulary metadata that is missing,
// malformed or names a tokenizer this package does not implement.
var ErrInvalid = errors.New("tokenizer: invalid vocabulary")

// TokenType is a token's type as GGUF stores it in tokenizer.ggml.token_type.
type TokenType int32

// Token types, with GGUF's (and SentencePiece's) numbering.
const (
	TypeUndefined   TokenType = 0
	TypeNormal      TokenType = 1
	TypeUnknown     TokenType = 2
	TypeControl     TokenType = 3
	TypeUserDefined TokenType = 4
	TypeUnused      TokenType = 5
	TypeByte        TokenType = 6
)

// kind is the tokenizer model: tokenizer.ggml.model.
type kind int

const (
	kindSPM kind = iota // "llama": SentencePiece BPE over scores, byte fallback
	kindBPE             // "gpt2": byte-level BPE over ranked merges
)

// spec is everything a Tokenizer is built from; FromGGUF fills it from the metadata.
// Optional flags are pointers: nil means "absent, use the model's default".
type spec struct {
	model  string // tokenizer.ggml.model
	pre    string // tokenizer.ggml.pre
	name   string // general.name, for llama.cpp's per-model token attributes
	tokens []string
	scores []float32   // may be nil (all 0)
	types  []TokenType // may be nil (all normal)
	merges []string    // "left right", for gpt2

	bos, eos, unk, eot, eom, pad, sep              int64 // -1 when absent
	fimPre, fimSuf, fimMid, fimPad, fimRep, fimSep int64

	addBOS, addEOS, addSpacePrefix *bool
}

func newSpec() spec {
	return spec{bos: -1, eos: -1, unk: -1, eot: -1, eom: -1,
		fimPre: -1, fimSuf: -1, fimMid: -1, fimPad: -1, fimRep: -1, fimSep: -1}
}

// mergeKey is one BPE merge: the two symbols it joins.
type mergeKey struct{ left, right string }

// Tokenizer encodes text to token ids and decodes them back, with the behaviour of
// llama.cpp's tokenizer for the same GGUF vocabulary. It is immutable after FromGGUF
// and safe for concurrent use.
type Tokenizer struct {
	kind  kind
	pre   *preTokenizer // BPE only
	texts []string
	score []float32
	types []TokenType
	toID  map[string]int32
	ranks map[mergeKey]int32 // BPE only

	pieces []string // the decoded text of each token (control tokens: empty)
	// byteTokens spells a byte that ends up in no token: SentencePiece's <0xXX>
	// token (else the byte's own token, else <unk>); for byte-level BPE, as in
	// llama.cpp, the token whose text is the raw byte, if any. -1: dropped.
	byteTokens [256]int32

	// Special tokens that the text partition looks for, longest first: all of them
	// when parsing special tokens, only user-defined ones otherwise.
	specialAll, specialUser *trie
	lstrip, rstrip          []bool // per token: swallow whitespace left/right of it
	// For quoted prompts (quote.go): the control and unknown tokens of more than one
	// character (quotable, and their texts backwards), and the special tokens a
	// quoted prompt is parsed for (specialQuoted: the quotable and user-defined ones).
	quotable, specialQuoted *trie
	quotableRev             *revTrie

	bos, eos, eot, unk int32
	eog                map[int32]bool

	addBOS, addEOS, addSpacePrefix, ignoreMerges bool

	// maxTokenBytes is the longest token text in bytes: no token covers more input
	// bytes than its text's length (SentencePiece's '▁' and GPT-2's alphabet only
	// lengthen a text). bounded says every input byte ends up in some token (no strip
	// attribute swallows whitespace, no byte is dropped for want of a byte token), so
	// that a text of n bytes has at least ceil(n / maxTokenBytes) tokens (minTokens).
	// rawBounded is bounded for the bytes of one raw fragment, whose whitespace no
	// strip attribute takes (Phi-3's special tokens rstrip: not bounded, rawBounded).
	maxTokenBytes int
	bounded       bool
	rawBounded    bool
}

// build checks s and constructs the Tokenizer.
func build(s spec) (*Tokenizer, error) {
	n := len(s.tokens)
	if n == 0 {
		return nil, fmt.Errorf("%w: no tokens (tokenizer.ggml.tokens)", ErrInvalid)
	}
	if n > 1<<31-1 {
		return nil, fmt.Errorf("%w: %d tokens", ErrInvalid, n)
	}
	if s.scores != nil && len(s.scores) != n {
		return nil, fmt.Errorf("%w: %d scores for %d tokens", ErrInvalid, len(s.scores), n)
	}
	if s.types != nil && len(s.types) != n {
		return nil, fmt.Errorf("%w: %d token types for %d tokens", ErrInvalid, len(s.types), n)
	}
	t := &Tokenizer{
		texts: make([]string, n),
		score: make([]float32, n),
		types: make([]TokenType, n),
		toID:  make(map[string]int32, n),
		bos:   -1, eos: -1, eot: -1, unk: -1,
	}
	for i, w := range s.tokens {
		if w == "" {
			w = fmt.Sprintf("[EMPTY_%d]", i) // as llama.cpp names them
		}
		t.texts[i] = w
		t.toID[w] = int32(i) // a later duplicate wins, as in llama.cpp
		if s.scores != nil {
			t.score[i] = s.scores[i]
		}
		t.types[i] = TypeNormal
		if s.types != nil {
			switch ty := s.types[i]; ty {
			case TypeNormal, TypeUnknown, TypeControl, TypeUserDefined, TypeUnused, TypeByte:
				t.types[i] = ty
			default:
				t.types[i] = TypeUndefined
			}
		}
	}
	id := func(v int64) int32 {
		if v < 0 || v >= int64(n) {
			return -1
		}
		return int32(v)
	}

	switch s.model {
	case "llama":
		t.kind = kindSPM
		t.bos, t.eos, t.unk = 1, 2, 0
		t.addSpacePrefix, t.addBOS = true, true
	case "gpt2":
		// llama.cpp defaults BOS and EOS to 11 here (GPT-NeoX's <|endoftext|>);
		// a vocabulary that does not name them has none.
		t.kind = kindBPE
		if len(s.merges) == 0 {
			return nil, fmt.Errorf("%w: no merges (tokenizer.ggml.merges) for a gpt2 vocabulary", ErrInvalid)
		}
		pre, ok := preTokenizers[s.pre]
		if s.pre == "" {
			pre, ok = preTokenizers["default"], true
		}
		if !ok {
			return nil, fmt.Errorf("%w: pre-tokenizer %q (tokenizer.ggml.pre) is not supported", ErrInvalid, s.pre)
		}
		p, err := pre.compile()
		if err != nil {
			return nil, err
		}
		t.pre = p
		t.ignoreMerges, t.addBOS = pre.ignoreMerges, pre.addBOS
		t.ranks = make(map[mergeKey]int32, len(s.merges))
		// Backwards, so that the first of duplicate merges keeps its rank, as in
		// llama.cpp. The split is at the first space after the first byte.
		for i := len(s.merges) - 1; i >= 0; i-- {
			m := s.merges[i]
			var k mergeKey
			if len(m) > 1 {
				if j := strings.IndexByte(m[1:], ' '); j >= 0 {
					k = mergeKey{m[:j+1], m[j+2:]}
				}
			}
			t.ranks[k] = int32(i)
		}
	default:
		return nil, fmt.Errorf("%w: tokenizer model %q (tokenizer.ggml.model) is not supported", ErrInvalid, s.model)
	}

	if s.bos >= 0 {
		t.bos = id(s.bos)
	}
	if s.eos >= 0 {
		t.eos = id(s.eos)
	}
	if s.unk >= 0 {
		t.unk = id(s.unk)
	}
	t.bos, t.eos, t.unk = checkID(t.bos, n), checkID(t.eos, n), checkID(t.unk, n)
	if s.addBOS != nil {
		t.addBOS = *s.addBOS
	}
	if s.addEOS != nil {
		t.addEOS = *s.addEOS
	}
	if s.addSpacePrefix != nil {
		t.addSpacePrefix = *s.addSpacePrefix
	}
	if t.bos < 0 {
		t.addBOS = false
	}
	if t.eos < 0 {
		t.addEOS = false
	}

	t.findSpecials(s, id)
	t.setStripAttrs(strings.ToLower(s.name))

	for b := range t.byteTokens {
		t.byteTokens[b] = -1
		if i, ok := t.toID[fmt.Sprintf("<0x%02X>", b)]; ok && t.kind == kindSPM {
			t.byteTokens[b] = i
		} else if i, ok := t.toID[string([]byte{byte(b)})]; ok {
			t.byteTokens[b] = i
		} else if t.kind == kindSPM {
			t.byteTokens[b] = t.unk
		}
	}
	t.setBound()
	t.pieces = make([]string, n)
	for i := range t.pieces {
		t.pieces[i] = t.piece(int32(i))
	}
	var all, user, quotable []int32
	var quotableTexts []string
	for i, ty := range t.types {
		switch ty {
		case TypeControl, TypeUnknown:
			all = append(all, int32(i))
			if utf8.RuneCountInString(t.texts[i]) > 1 {
				quotable = append(quotable, int32(i))
				quotableTexts = append(quotableTexts, t.texts[i])
			}
		case TypeUserDefined:
			all = append(all, int32(i))
			user = append(user, int32(i))
		}
	}
	t.specialAll, t.specialUser = t.newTrie(all), t.newTrie(user)
	t.quotable, t.quotableRev = t.newTrie(quotable), newRevTrie(quotableTexts)
	t.specialQuoted = t.specialAll
	if len(quotable)+len(user) < len(all) { // one-character control tokens
		t.specialQuoted = t.newTrie(append(quotable, user...))
	}
	return t, nil
}

func checkID(v int32, n int) int32 {
	if v < 0 || int(v) >= n {
		return -1
	}
	return v
}

// Auto-detection by token text, as llama.cpp does for vocabularies whose metadata do
// not name these tokens. A detected token becomes a control token.
var (
	eotTexts    = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "_<EOT>", "<｜end▁of▁sentence｜>", "<end_of_utterance>"}
	eomTexts    = []string{"<|eom_id|>"}
	fimPreTexts = []string{"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "▁<PRE>", "<｜fim▁begin｜>"}
	fimSufTexts = []string{"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "▁<SUF>", "<｜fim▁hole｜>"}
	fimMidTexts = []string{"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "▁<MID>", "<｜fim▁end｜>"}
	fimPadTexts = []string{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"}
	fimRepTexts = []string{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}
	fimSepTexts = []string{"<|file_sep|>", "<file_sep>", "<fim-sep>", "<SEP>"}
	// Every token with one of these texts ends generation.
	// As in current llama.cpp this includes "</s>" (added there for PaddleOCR), so a
	// "</s>" that a vocabulary has as a normal or user-defined token (Qwen2, Phi-3)
	// ends generation too.
	eogTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
		"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
		"<|end_of_text|>", "<end_of_utterance>"}
)

// findSpecials sets EOT and the end-of-generation set the way llama.cpp's vocabulary
// loader does: ids from the metadata first, then well-known texts. A token found by
// its text becomes a control token, as in llama.cpp, unless the vocabulary's token
// types call it normal: a text that merely looks special ("</s>" in Qwen2's
// vocabulary, an HTML strikethrough tag elsewhere) stays text that special-token
// parsing leaves alone. Here lmlite departs from llama.cpp, which makes it a control
// token; Hugging Face's tokenizer, which the model was trained with, does not.
func (t *Tokenizer) findSpecials(s spec, id func(int64) int32) {
	control := func(i int32) {
		if s.types == nil || t.types[i] != TypeNormal {
			t.types[i] = TypeControl
		}
	}
	detect := func(given int64, texts []string) int32 {
		if v := id(given); v >= 0 {
			return v
		}
		for _, w := range texts {
			if i, ok := t.toID[w]; ok {
				control(i)
				return i
			}
		}
		return -1
	}
	t.eot = detect(s.eot, eotTexts)
	eom := detect(s.eom, eomTexts)
	detect(s.fimPre, fimPreTexts)
	detect(s.fimSuf, fimSufTexts)
	detect(s.fimMid, fimMidTexts)
	t.eog = map[int32]bool{}
	for _, v := range []int32{detect(s.fimPad, fimPadTexts), detect(s.fimRep, fimRepTexts), detect(s.fimSep, fimSepTexts), t.eos, t.eot, eom} {
		if v >= 0 {
			t.eog[v] = true
		}
	}
	for _, w := range eogTexts {
		if i, ok := t.toID[w]; ok {
			t.eog[i] = true
			control(i)
		}
	}
}

// setStripAttrs gives Phi-3's special tokens llama.cpp's rstrip attribute: the
// whitespace after them in a text is not tokenized.
func (t *Tokenizer) setStripAttrs(name string) {
	t.lstrip = make([]bool, len(t.texts))
	t.rstrip = make([]bool, len(t.texts))
	if !strings.Contains(name, "phi-3") && !strings.Contains(name, "phi3") {
		return
	}
	for i, ty := range t.types {
		if ty == TypeControl || ty == TypeUserDefined || ty == TypeUnknown {
			t.rstrip[i] = true
		}
	}
	if i, ok := t.toID["</s>"]; ok {
		t.rstrip[i] = true
	}
	for _, w := range []string{"<unk>", "<s>", "<|endoftext|>"} {
		if i, ok := t.toID[w]; ok {
			t.rstrip[i] = false
		}
	}
}

// piece is the text token id decodes to (llama.cpp's token_to_piece with special
// tokens not rendered): control and unknown tokens give nothing, user-defined ones
// their text, byte tokens their byte, normal ones their text with SentencePiece's
// '▁' or GPT-2's byte-to-unicode mapping undone.
func (t *Tokenizer) piece(id int32) string {
	w := t.texts[id]
	switch t.types[id] {
	case TypeUserDefined:
		return w
	case TypeNormal:
		if t.kind == kindSPM {
			return strings.ReplaceAll(w, "▁", " ")
		}
		return decodeByteLevel(w)
	case TypeByte:
		if t.kind == kindSPM {
			if b, ok := parseByteToken(w); ok {
				return string([]byte{b})
			}
			return ""
		}
		return decodeByteLevel(w)
	}
	return ""
}

// parseByteToken parses SentencePiece's byte token text "<0xXX>".
func parseByteToken(w string) (byte, bool) {
	if len(w) != 6 || !strings.HasPrefix(w, "<0x") || w[5] != '>' {
		return 0, false
	}
	var b byte
	for _, c := range []byte(w[3:5]) {
		switch {
		case c >= '0' && c <= '9':
			b = b<<4 | (c - '0')
		case c >= 'A' && c <= 'F':
			b = b<<4 | (c - 'A' + 10)
		case c >= 'a' && c <= 'f':
			b = b<<4 | (c - 'a' + 10)
		default:
			return 0, false
		}
	}
	return b, true
}

// AddBOS reports whether the vocabulary asks for a BOS token before a prompt
// (tokenizer.ggml.add_bos_token; when absent, true for SentencePiece vocabularies and
// Llama 3's, false for other byte-level BPE ones, as llama.cpp decides).
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// AddEOS reports whether the vocabulary asks for an EOS token after a prompt.
func (t *Tokenizer) AddEOS() bool { return t.addEOS }

// BOS is the beginning-of-sequence token, -1 if none.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS is the end-of-sequence token, -1 if none.
func (t *Tokenizer) EOS() int32 { return t.eos }

// EOT is the end-of-turn token (<|eot_id|>, <|im_end|>, <|end|> ...), -1 if none.
func (t *Tokenizer) EOT() int32 { return t.eot }

// IsEOG reports whether generation ends at id: EOS, EOT, and the other tokens
// llama.cpp counts as end of generation.
func (t *Tokenizer) IsEOG(id int32) bool { return t.eog[id] }

// VocabSize is the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.texts) }

// TokenText is the raw text of token id as the vocabulary stores it ("" if id is
// out of range).
func (t *Tokenizer) TokenText(id int32) string {
	if id < 0 || int(id) >= len(t.texts) {
		return ""
	}
	return t.texts[id]
}

// Piece is the text token id stands for on its own (llama.cpp's token_to_piece
// without special tokens): "" for control and unknown tokens, a byte token's byte
// (possibly part of a UTF-8 character), a SentencePiece token's leading space kept.
// Use a StreamDecoder to join pieces into text.
func (t *Tokenizer) Piece(id int32) string {
	if id < 0 || int(id) >= len(t.pieces) {
		return ""
	}
	return t.pieces[id]
}

// Type is the type of token id (TypeUndefined if id is out of range).
func (t *Tokenizer) Type(id int32) TokenType {
	if id < 0 || int(id) >= len(t.types) {
		return TypeUndefined
	}
	return t.types[id]
}

// ID is the token whose raw text is w.
func (t *Tokenizer) ID(w string) (int32, bool) {
	i, ok := t.toID[w]
	return i, ok
}

// setBound sets maxTokenBytes, bounded and rawBounded (see Tokenizer). An input byte
// can be lost three ways: a strip attribute swallows the whitespace beside a special
// token (only outside the raw fragments: rawBounded holds with it); SentencePiece
// spells a character that is no token in byte tokens, and a byte without one is
// dropped; byte-level BPE starts from one symbol per byte (a character of GPT-2's
// alphabet) and emits a symbol that is no token byte by byte, dropping bytes without
// a token, so every character of the alphabet and the join of every merge must be
// tokens.
func (t *Tokenizer) setBound() {
	t.maxTokenBytes = 1
	for _, w := range t.texts {
		t.maxTokenBytes = max(t.maxTokenBytes, len(w))
	}
	t.rawBounded = t.keepsEveryByte()
	t.bounded = t.rawBounded
	for i := range t.lstrip {
		if t.lstrip[i] || t.rstrip[i] {
			t.bounded = false
			break
		}
	}
}

// keepsEveryByte says every byte of a raw fragment ends up in some token.
func (t *Tokenizer) keepsEveryByte() bool {
	switch t.kind {
	case kindSPM:
		for _, id := range t.byteTokens {
			if id < 0 {
				return false
			}
		}
	case kindBPE:
		for _, r := range byteToRune {
			if _, ok := t.toID[string(r)]; !ok {
				return false
			}
		}
		for k := range t.ranks {
			if _, ok := t.toID[k.left+k.right]; !ok {
				return false
			}
		}
	}
	return true
}

// minTokens is a lower bound on the tokens of n bytes of input text (0 when the
// vocabulary allows none: see bounded).
func (t *Tokenizer) minTokens(n int) int {
	if !t.bounded || n <= 0 {
		return 0
	}
	return (n-1)/t.maxTokenBytes + 1
}

// minRawTokens is minTokens for n bytes of one raw fragment (the text between two
// special tokens, less what their strip attributes swallowed: see rawBounded).
func (t *Tokenizer) minRawTokens(n int) int {
	if !t.rawBounded || n <= 0 {
		return 0
	}
	return (n-1)/t.maxTokenBytes + 1
}
