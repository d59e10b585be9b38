package tokenizer

import (
	"fmt"

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
// splits. That keeps nine pre-tokenizers as nine tables of data instead of nine
// hand-written scanners, at a speed (a few MB/s) far above what a prompt needs.
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
		`\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+`,
		`\s?[!-/:-~！-／：-～‘-‟　-。]+`,
		`\s+\z`, // ECMAScript's $ without multiline; .NET's $ would also match before a final \n
		`[一-龥ࠀ-一가-퟿]+`,
		`\p{N}+`,
	}}
	preDeepseekCoder = preSpec{exprs: []string{
		`[\r\n]`,
		`\s?\p{L}+`,
		`\s?\p{P}+`,
		`[一-龥ࠀ-一가-퟿]+`,
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

// preTokenizer is a compiled preSpec.
type preTokenizer struct {
	res []*regexp2.Regexp
}

func (p preSpec) compile() (*preTokenizer, error) {
	pt := &preTokenizer{}
	for _, e := range p.exprs {
		re, err := regexp2.Compile(e, regexp2.None)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: pre-tokenizer expression %q: %w", e, err)
		}
		pt.res = append(pt.res, re)
	}
	return pt, nil
}

// split returns the end offsets (in runes) of the words of runes.
func (p *preTokenizer) split(runes []rune) []int {
	ends := []int{len(runes)}
	var next []int
	for _, re := range p.res {
		next = next[:0]
		start := 0
		for _, end := range ends {
			piece := runes[start:end]
			at := 0 // offset in piece of the text not yet emitted
			m, err := re.FindRunesMatch(piece)
			for err == nil && m != nil {
				if m.Index > at {
					next = append(next, start+m.Index)
				}
				if m.Length > 0 {
					next = append(next, start+m.Index+m.Length)
				}
				at = m.Index + m.Length
				m, err = re.FindNextMatch(m)
			}
			if at < len(piece) {
				next = append(next, end)
			}
			start = end
		}
		ends, next = next, ends
	}
	return ends
}
