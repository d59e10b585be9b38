package tokenizer

import (
	"fmt"
	"unicode"

	"github.com/dlclark/regexp2"
)

// The pre-tokenizers split text into words before byte-level BPE runs on each word.
// Each is a list of regular expressions applied in turn, as llama.cpp applies them:
// every expression splits each piece left by the previous ones into its matches and
// the text between them, so nothing is ever dropped.
//
// The expressions are llama.cpp's, which are the Hugging Face tokenizers' with
// case-insensitive groups spelled out. They need lookahead ((?!\S)), which Go's
// regexp lacks; github.com/dlclark/regexp2 (a maintained port of .NET's engine) has
// it, has \p{L}/\p{N}/\p{P} from Go's own Unicode tables, and backtracks like the
// ECMAScript engine llama.cpp falls back to, so the same expressions give the same
// splits: nine pre-tokenizers are nine tables of data, not nine scanners. The two
// expressions nearly every vocabulary uses (GPT-2's, and Llama 3's with its Qwen2
// variant) also have hand-written matchers, as in llama.cpp: they encode 5-7 times
// faster than through regexp2, and FuzzMatchers holds them to regexp2's splits.

// preSpec is one pre-tokenizer and the defaults that come with its name.
type preSpec struct {
	exprs        []string
	ignoreMerges bool // a word that is itself a token is not merged (Llama 3)
	addBOS       bool // default of add_bos_token
}

const (
	gpt2Expr  = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
	llama3Exp = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Expr = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// cjkExpr is deepseek's [一-龥ࠀ-一가-퟿]+ with the whitespace characters taken out of
// its ranges: llama.cpp runs such expressions over text in which every non-ASCII
// whitespace character has been replaced by \v, so they never match one.
const cjkExpr = "[\u4e00-\u9fa5\u0800-\u167f\u1681-\u1fff\u200b-\u2027\u202a-\u202e\u2030-\u205e\u2060-\u2fff\u3001-\u4e00\uac00-\ud7ff]+"

var (
	preDefault = preSpec{exprs: []string{
		`[\p{P}\$\+<=>\^~\|` + "`" + `]+`,
		gpt2Expr,
		`\p{N}+`,
		`[0-9][0-9][0-9]`,
	}}
	preLlama3 = preSpec{exprs: []string{llama3Exp}, ignoreMerges: true, addBOS: true}
	preQwen2  = preSpec{exprs: []string{qwen2Expr}}
	preGPT2   = preSpec{exprs: []string{gpt2Expr}}
	preCoder  = preSpec{exprs: []string{`\p{N}`, gpt2Expr}} // starcoder, refact
	preFalcon = preSpec{exprs: []string{
		`[\p{P}\$\+<=>\^~\|` + "`" + `]+`,
		gpt2Expr,
		`[0-9][0-9][0-9]`,
	}}
	preDeepseekLLM = preSpec{exprs: []string{
		`[\r\n]`,
		"\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+",
		"\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3001-\u3002]+", // U+3000: see cjkExpr,
		`\s+\z`, // ECMAScript's $ without multiline; .NET's $ would also match before a final \n
		cjkExpr,
		`\p{N}+`,
	}}
	preDeepseekCoder = preSpec{exprs: []string{
		`[\r\n]`,
		`\s?\p{L}+`,
		`\s?\p{P}+`,
		cjkExpr,
		`\p{N}`,
	}}
)

// preTokenizers maps tokenizer.ggml.pre to its pre-tokenizer, with the names
// llama.cpp accepts for each.
var preTokenizers = map[string]preSpec{
	"default":          preDefault,
	"llama3":           preLlama3,
	"llama-v3":         preLlama3,
	"llama-bpe":        preLlama3,
	"falcon3":          preLlama3,
	"dbrx":             preLlama3,
	"smaug-bpe":        preLlama3,
	"qwen2":            preQwen2,
	"qwen2.5":          preQwen2,
	"qwen-2.5":         preQwen2,
	"deepseek-r1-qwen": preQwen2,
	"stablelm2":        preQwen2,
	"gpt-2":            preGPT2,
	"phi-2":            preGPT2,
	"mpt":              preGPT2,
	"olmo":             preGPT2,
	"jais":             preGPT2,
	"starcoder":        preCoder,
	"refact":           preCoder,
	"smollm":           preCoder,
	"codeshell":        preCoder,
	"command-r":        preCoder,
	"falcon":           preFalcon,
	"deepseek-llm":     preDeepseekLLM,
	"deepseek-coder":   preDeepseekCoder,
}

// preTokenizer is a compiled preSpec: one stage per expression.
type preTokenizer struct {
	stages []stage
}

// stage splits a piece of text (runes, at offset base of the whole text) into its
// matches and the text between them, appending the end offsets to ends.
type stage interface {
	split(piece []rune, base int, ends []int) []int
}

func (p preSpec) compile() (*preTokenizer, error) {
	pt := &preTokenizer{}
	for _, e := range p.exprs {
		st, err := compileStage(e)
		if err != nil {
			return nil, err
		}
		pt.stages = append(pt.stages, st)
	}
	return pt, nil
}

// compileStage uses a hand-written matcher for the expressions that have one,
// regexp2 for the others.
func compileStage(e string) (stage, error) {
	if m, ok := matchers[e]; ok {
		return m, nil
	}
	re, err := regexp2.Compile(e, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: pre-tokenizer expression %q: %w", e, err)
	}
	return regexStage{re}, nil
}

// split returns the end offsets (in runes) of the words of runes.
func (p *preTokenizer) split(runes []rune) []int {
	ends := []int{len(runes)}
	var next []int
	for _, st := range p.stages {
		next = next[:0]
		start := 0
		for _, end := range ends {
			next = st.split(runes[start:end], start, next)
			start = end
		}
		ends, next = next, ends
	}
	return ends
}

type regexStage struct{ re *regexp2.Regexp }

func (s regexStage) split(piece []rune, base int, ends []int) []int {
	at := 0 // offset in piece of the text not yet emitted
	m, err := s.re.FindRunesMatch(piece)
	for err == nil && m != nil {
		if m.Index > at {
			ends = append(ends, base+m.Index)
		}
		if m.Length > 0 {
			ends = append(ends, base+m.Index+m.Length)
		}
		at = m.Index + m.Length
		m, err = s.re.FindNextMatch(m)
	}
	if at < len(piece) {
		ends = append(ends, base+len(piece))
	}
	return ends
}

// matcher is a hand-written regular expression: the length of its leftmost-first
// match starting exactly at r[i], 0 if none (none of them matches empty text).
type matcher func(r []rune, i int) int

// split finds matches the way a regular expression search does: try each position
// in turn; text where no match starts is emitted as one piece.
func (m matcher) split(piece []rune, base int, ends []int) []int {
	gap := false
	for i := 0; i < len(piece); {
		if n := m(piece, i); n > 0 {
			if gap {
				ends = append(ends, base+i)
				gap = false
			}
			i += n
			ends = append(ends, base+i)
		} else {
			gap = true
			i++
		}
	}
	if gap {
		ends = append(ends, base+len(piece))
	}
	return ends
}

var matchers = map[string]matcher{
	gpt2Expr:  matchGPT2,
	llama3Exp: func(r []rune, i int) int { return matchLlama3(r, i, 3) },
	qwen2Expr: func(r []rune, i int) int { return matchLlama3(r, i, 1) },
}

func isL(c rune) bool     { return unicode.IsLetter(c) }
func isN(c rune) bool     { return unicode.IsNumber(c) }
func isSpace(c rune) bool { return unicode.IsSpace(c) }
func isOther(c rune) bool { return !isSpace(c) && !isL(c) && !isN(c) }
func isNL(c rune) bool    { return c == '\r' || c == '\n' }

// run is the end of the run of characters from i on that f accepts.
func run(r []rune, i int, f func(rune) bool) int {
	for i < len(r) && f(r[i]) {
		i++
	}
	return i
}

// contraction matches 's 't 're 've 'm 'll 'd at i (any case if fold).
func contraction(r []rune, i int, fold bool) int {
	if r[i] != '\'' || i+1 >= len(r) {
		return 0
	}
	lower := func(c rune) rune {
		if fold && c >= 'A' && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	switch lower(r[i+1]) {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v', 'l':
		if i+2 < len(r) {
			a, b := lower(r[i+1]), lower(r[i+2])
			if (a == 'r' || a == 'v') && b == 'e' || a == 'l' && b == 'l' {
				return 3
			}
		}
	}
	return 0
}

// trailingSpace matches \s+(?!\S) at i: a run of whitespace, less its last
// character when a non-space follows.
func trailingSpace(r []rune, i int) int {
	if !isSpace(r[i]) {
		return 0
	}
	j := run(r, i, isSpace)
	if j < len(r) {
		j--
	}
	return j - i
}

// matchGPT2 is gpt2Expr: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
func matchGPT2(r []rune, i int) int {
	if n := contraction(r, i, false); n > 0 {
		return n
	}
	j := i
	if r[j] == ' ' && j+1 < len(r) {
		j++
	}
	for _, f := range []func(rune) bool{isL, isN, isOther} {
		if f(r[j]) {
			return run(r, j, f) - i
		}
	}
	return trailingSpace(r, i)
}

// matchLlama3 is llama3Exp (maxDigits 3) and qwen2Expr (maxDigits 1):
// (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|
// \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func matchLlama3(r []rune, i int, maxDigits int) int {
	if n := contraction(r, i, true); n > 0 {
		return n
	}
	c := r[i]
	if isL(c) {
		return run(r, i, isL) - i
	}
	if !isNL(c) && !isN(c) && i+1 < len(r) && isL(r[i+1]) {
		return run(r, i+1, isL) - i
	}
	if isN(c) {
		j := i
		for j < len(r) && j-i < maxDigits && isN(r[j]) {
			j++
		}
		return j - i
	}
	j := i
	if c == ' ' && j+1 < len(r) {
		j++
	}
	if isOther(r[j]) {
		return run(r, run(r, j, isOther), isNL) - i
	}
	if !isSpace(c) {
		return 0
	}
	// \s*[\r\n]+: the whitespace up to and including its last line break.
	end := run(r, i, isSpace)
	for k := end - 1; k >= i; k-- {
		if isNL(r[k]) {
			return k + 1 - i
		}
	}
	if n := trailingSpace(r, i); n > 0 {
		return n
	}
	return end - i // \s+
}
