package chat

import (
	"strings"

	"github.com/nikolalohinski/gonja/v2/tokens"
)

// Jinja's conditional expression, A if C else B, may stand anywhere an expression
// may: in parentheses, list items, call arguments, dict values. gonja parses it only
// at the top of {{ }} and {% set %}, so templates such as Gemma 3's
// (("model" if role == "assistant" else role)) or Mistral Medium 3.5's
// ([31, (29 if leap else 28), 31]) fail to parse. rewriteConditionals rewrites,
// before parsing, each conditional inside brackets into an expression gonja parses
// with the same value and the same laziness:
//
//	A if C else B   ->   ((C) and [A] or [B])[0]
//
// gonja's and/or return an operand and evaluate the right one only when needed
// (Python's semantics), and a one-item list is true, so only the branch taken is
// evaluated. A if C without else gives none where Jinja gives undefined. B may be
// a conditional itself (they chain to the right).

// rewriteConditionals returns src with the conditionals inside brackets rewritten,
// or src itself when it has none (or does not lex: the parser reports that).
func rewriteConditionals(src string) string {
	if !strings.Contains(src, "if") {
		return src
	}
	// The lexer normalizes line ends and drops one final newline; positions are
	// in the normalized text, and the parser will normalize the result again.
	norm := strings.ReplaceAll(strings.ReplaceAll(src, "\r\n", "\n"), "\r", "\n")
	trailing := ""
	if !hfConfig.KeepTrailingNewline && strings.HasSuffix(norm, "\n") {
		norm, trailing = norm[:len(norm)-1], "\n"
	}
	stream := tokens.LexAll(norm, hfConfig)
	var toks []*tokens.Token
	for !stream.End() {
		t := stream.Next()
		if t == nil || t.Type == tokens.Error {
			return src
		}
		toks = append(toks, t)
		if t.Type == tokens.EOF {
			break
		}
	}
	r := &condRewriter{src: norm, toks: toks, match: make([]int, len(toks))}
	for i := range r.match {
		r.match[i] = -1
	}
	// Match brackets within each tag; an unbalanced tag is left alone.
	var stack []int
	for i, t := range toks {
		switch t.Type {
		case tokens.VariableBegin, tokens.BlockBegin:
			stack = stack[:0]
		case tokens.LeftParenthesis, tokens.LeftBracket, tokens.LeftBrace:
			stack = append(stack, i)
		case tokens.RightParenthesis, tokens.RightBracket, tokens.RightBrace:
			if n := len(stack); n > 0 && closes(toks[stack[n-1]].Type, t.Type) {
				r.match[stack[n-1]] = i
				stack = stack[:n-1]
			} else {
				stack = stack[:0]
			}
		}
	}
	var sb strings.Builder
	pos, changed := 0, false
	for i := 0; i < len(toks); i++ {
		j := r.match[i]
		if j < 0 {
			continue
		}
		if r.hasCond(i+1, j) {
			sb.WriteString(norm[pos:toks[i+1].Pos])
			sb.WriteString(r.group(i, j))
			pos, changed = toks[j].Pos, true
		}
		i = j
	}
	if !changed {
		return src
	}
	sb.WriteString(norm[pos:])
	return sb.String() + trailing
}

func closes(open, close tokens.Type) bool {
	switch open {
	case tokens.LeftParenthesis:
		return close == tokens.RightParenthesis
	case tokens.LeftBracket:
		return close == tokens.RightBracket
	}
	return close == tokens.RightBrace
}

type condRewriter struct {
	src   string
	toks  []*tokens.Token
	match []int // the index of the bracket closing the one at i, or -1
}

// hasCond reports whether tokens [i, j) hold an "if" (at any depth).
func (r *condRewriter) hasCond(i, j int) bool {
	for k := i; k < j; k++ {
		if r.toks[k].Type == tokens.Name && r.toks[k].Val == "if" {
			return true
		}
	}
	return false
}

// group is the text inside the brackets at open and close, each item rewritten.
// Items are separated at the group's own level by commas, and by colons (dict
// keys, slices) and "=" (keyword arguments), which a conditional cannot contain.
func (r *condRewriter) group(open, close int) string {
	var sb strings.Builder
	start := open + 1
	for k := open + 1; k <= close; k++ {
		if m := r.match[k]; m >= 0 && k != close {
			k = m
			continue
		}
		switch r.toks[k].Type {
		case tokens.Comma, tokens.Colon, tokens.Assign:
		default:
			if k != close {
				continue
			}
		}
		sb.WriteString(r.item(start, k))
		if k != close {
			sb.WriteString(r.src[r.toks[k].Pos:r.toks[k+1].Pos])
		}
		start = k + 1
	}
	return sb.String()
}

// item is the text of tokens [i, j), a conditional at its level rewritten.
func (r *condRewriter) item(i, j int) string {
	cond, alt := -1, -1
	for k := i; k < j; k++ {
		if m := r.match[k]; m >= 0 {
			k = m
			continue
		}
		if r.toks[k].Type != tokens.Name {
			continue
		}
		if r.toks[k].Val == "if" && cond < 0 {
			cond = k
		} else if r.toks[k].Val == "else" && cond >= 0 {
			alt = k
			break
		}
	}
	if cond < 0 {
		return r.span(i, j)
	}
	if alt < 0 {
		return "((" + r.span(cond+1, j) + ") and [" + r.span(i, cond) + "] or [none])[0]"
	}
	return "((" + r.span(cond+1, alt) + ") and [" + r.span(i, cond) + "] or [" + r.item(alt+1, j) + "])[0]"
}

// span is the text of tokens [i, j), up to the start of token j, with the groups
// inside rewritten.
func (r *condRewriter) span(i, j int) string {
	if i >= j {
		return ""
	}
	var sb strings.Builder
	pos := r.toks[i].Pos
	for k := i; k < j; k++ {
		m := r.match[k]
		if m < 0 || m >= j {
			continue
		}
		if r.hasCond(k+1, m) {
			sb.WriteString(r.src[pos:r.toks[k+1].Pos])
			sb.WriteString(r.group(k, m))
			pos = r.toks[m].Pos
		}
		k = m
	}
	sb.WriteString(r.src[pos:r.toks[j].Pos])
	return sb.String()
}
