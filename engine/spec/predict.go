package spec

// Predicted is one sequence's prediction (OpenAI's Predicted Outputs: the client's
// expected output, as in code editing) as a draft source, aligned to the output as
// it goes. While the output follows the prediction, the drafts are the prediction's
// next tokens; after the output departs from it, Draft re-aligns by finding the
// output's last tokens (an n-gram, the longest of MaxAlign down to MinNGram) in the
// prediction, preferring an occurrence at or after the furthest point the output
// had followed (edits keep the text's order), and drafts what follows there. The
// zero value predicts nothing.
type Predicted struct {
	Toks []int32 // the prediction's tokens
	Pos  int     // the index in Toks of the next output token while aligned; -1: not aligned
	Far  int     // the furthest Pos the output reached: re-alignment looks here first
}

// MaxAlign is the longest n-gram of the output Predicted.Draft looks for in the
// prediction to re-align.
const MaxAlign = 8

// NewPredicted is the prediction toks, aligned to the start of the output.
func NewPredicted(toks []int32) Predicted { return Predicted{Toks: toks} }

// Advance records the output's next token t: the alignment moves on when t is the
// predicted one and is lost otherwise.
func (p *Predicted) Advance(t int32) {
	if p.Pos >= 0 && p.Pos < len(p.Toks) && p.Toks[p.Pos] == t {
		p.Pos++
		p.Far = max(p.Far, p.Pos)
		return
	}
	p.Pos = -1
}

// Draft appends to dst up to k predicted tokens to follow seq (the sequence's prompt
// and output, whose tokens Advance has seen), re-aligning first if the output left
// the prediction; it returns dst unchanged when nothing is predicted there.
func (p *Predicted) Draft(dst, seq []int32, k int) []int32 {
	if k <= 0 || len(p.Toks) == 0 {
		return dst
	}
	if p.Pos < 0 {
		p.Pos = p.align(seq)
		if p.Pos < 0 {
			return dst
		}
	}
	rest := p.Toks[p.Pos:]
	return append(dst, rest[:min(k, len(rest))]...)
}

// align is the index in Toks after an occurrence of seq's last n tokens (n from
// MaxAlign down to MinNGram; the longest that occurs wins), the first occurrence
// ending at or after Far if any, else the first one; -1 when none occurs.
func (p *Predicted) align(seq []int32) int {
	for n := min(MaxAlign, len(seq)); n >= MinNGram; n-- {
		key := seq[len(seq)-n:]
		first := -1
		for i := 0; i+n <= len(p.Toks); i++ {
			if p.Toks[i] != key[0] || !equal(p.Toks[i:i+n], key) {
				continue
			}
			if i+n >= p.Far {
				return i + n
			}
			if first < 0 {
				first = i + n
			}
		}
		if first >= 0 {
			return first
		}
	}
	return -1
}
