package openai

import (
	"math"
	"strconv"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/internal/jsonenc"
)

// This file renders tokens' logprobs in OpenAI's two shapes: chat's (content[] with
// token, logprob, bytes and top_logprobs) and completions' legacy one.

// appendFloat appends a logprob; -Inf (a token the model gives no chance) is
// OpenAI's floor, -9999.
func appendFloat(b []byte, f float32) []byte {
	if math.IsInf(float64(f), -1) || math.IsNaN(float64(f)) {
		return append(b, "-9999.0"...)
	}
	return strconv.AppendFloat(b, float64(f), 'g', -1, 32)
}

// appendTokenLogprob appends OpenAI's {"token", "logprob", "bytes"} members.
func appendTokenLogprob(b []byte, piece string, lp float32) []byte {
	b = append(b, `"token":`...)
	b = jsonenc.AppendString(b, piece)
	b = append(b, `,"logprob":`...)
	b = appendFloat(b, lp)
	b = append(b, `,"bytes":[`...)
	for k := 0; k < len(piece); k++ {
		if k > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(piece[k]), 10)
	}
	return append(b, ']')
}

// appendChatLogprobs appends a chat choice's logprobs object for tokens.
func appendChatLogprobs(b []byte, toks []engine.Token) []byte {
	b = append(b, `{"content":[`...)
	for i, t := range toks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		b = appendTokenLogprob(b, t.Piece, t.Logprob)
		b = append(b, `,"top_logprobs":[`...)
		for k, tl := range t.TopLogprobs {
			if k > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			b = appendTokenLogprob(b, tl.Piece, tl.Logprob)
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	return append(b, `],"refusal":null}`...)
}

// appendLegacyLogprobs appends a text completion's logprobs object (OpenAI's legacy
// shape): tokens, token_logprobs, top_logprobs (token → logprob) and text_offset,
// for the echoed prompt's tokens (the first with null logprobs: nothing precedes
// it), their offsets counted from 0 within the prompt's plen bytes, then the
// output's tokens, their offsets in the choice's text counted from off.
func appendLegacyLogprobs(b []byte, prompt []engine.Token, plen int, toks []engine.Token, off int) []byte {
	all := func(yield func(int, engine.Token) bool) {
		for i, t := range prompt {
			if !yield(i, t) {
				return
			}
		}
		for i, t := range toks {
			if !yield(len(prompt)+i, t) {
				return
			}
		}
	}
	b = append(b, `{"tokens":[`...)
	for i, t := range all {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendString(b, t.Piece)
	}
	b = append(b, `],"token_logprobs":[`...)
	for i, t := range all {
		if i > 0 {
			b = append(b, ',')
		}
		if i == 0 && len(prompt) > 0 {
			b = append(b, "null"...)
			continue
		}
		b = appendFloat(b, t.Logprob)
	}
	b = append(b, `],"top_logprobs":[`...)
	for i, t := range all {
		if i > 0 {
			b = append(b, ',')
		}
		if i == 0 && len(prompt) > 0 {
			b = append(b, "null"...)
			continue
		}
		b = append(b, '{')
		seen := 0
		for _, tl := range t.TopLogprobs {
			if dupPiece(t.TopLogprobs, tl) {
				continue
			}
			if seen > 0 {
				b = append(b, ',')
			}
			seen++
			b = jsonenc.AppendString(b, tl.Piece)
			b = append(b, ':')
			b = appendFloat(b, tl.Logprob)
		}
		b = append(b, '}')
	}
	b = append(b, `],"text_offset":[`...)
	poff := 0
	for i, t := range all {
		if i > 0 {
			b = append(b, ',')
		}
		if i < len(prompt) {
			b = strconv.AppendInt(b, int64(poff), 10)
			poff = min(poff+len(t.Text), plen)
			continue
		}
		b = strconv.AppendInt(b, int64(off), 10)
		off += len(t.Text)
	}
	return append(b, "]}"...)
}

// dupPiece reports whether an earlier (more likely) entry of top has tl's text: a
// JSON object keeps one member per name, the most likely.
func dupPiece(top []engine.TopLogprob, tl engine.TopLogprob) bool {
	for _, o := range top {
		if o.ID == tl.ID {
			return false
		}
		if o.Piece == tl.Piece {
			return true
		}
	}
	return false
}
