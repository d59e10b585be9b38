package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// Decode returns the text of ids: each token's piece (see StreamDecoder) joined.
// Control and unknown tokens (BOS, EOS, <|im_end|> ...) give no text; ids out of
// range are skipped. The result is the bytes the tokens stand for, which may be
// invalid UTF-8 if ids end or start in the middle of a character.
func (t *Tokenizer) Decode(ids []int32) string {
	d := t.NewDecoder()
	var sb strings.Builder
	for _, id := range ids {
		sb.WriteString(d.Next(id))
	}
	sb.WriteString(d.Flush())
	return sb.String()
}

// StreamDecoder turns a stream of token ids into text, a piece at a time, never
// splitting a UTF-8 character: bytes of an incomplete character (a multi-byte
// character spelled in byte tokens, or a byte-level BPE token that ends inside a
// character) are held back until the character completes. Bytes that can never
// form a character are passed on as they are.
//
// A SentencePiece vocabulary that prefixes a space when encoding (add_space_prefix)
// drops the leading space of the first piece of text (after BOS, or at the start),
// as SentencePiece's and llama2.c's decoders do; so Decode(Encode(s)) == s. A
// decoder for the continuation of a prompt should be told the prompt (Prime) so that
// the first generated piece keeps its space.
//
// A StreamDecoder is for one goroutine.
type StreamDecoder struct {
	t       *Tokenizer
	pending []byte
	started bool // some text was produced (or primed) already
}

// NewDecoder returns a decoder at the start of a text.
func (t *Tokenizer) NewDecoder() *StreamDecoder {
	return &StreamDecoder{t: t}
}

// Prime tells d that ids came before the tokens it will decode (a prompt). They give
// no output; they only decide whether the first piece is at the start of the text.
func (d *StreamDecoder) Prime(ids []int32) {
	for _, id := range ids {
		if id >= 0 && int(id) < len(d.t.pieces) && d.t.pieces[id] != "" {
			d.started = true
			return
		}
	}
}

// Next returns the complete text that id adds, possibly "" (a control token, or bytes
// held back until their character is complete).
func (d *StreamDecoder) Next(id int32) string {
	if id < 0 || int(id) >= len(d.t.pieces) {
		return ""
	}
	p := d.t.pieces[id]
	if p == "" {
		return ""
	}
	if !d.started {
		d.started = true
		if d.t.kind == kindSPM && d.t.addSpacePrefix && d.t.types[id] == TypeNormal && p[0] == ' ' {
			p = p[1:]
		}
	}
	if len(d.pending) == 0 {
		n := completeLen(p)
		if n == len(p) {
			return p
		}
		d.pending = append(d.pending, p[n:]...)
		return p[:n]
	}
	d.pending = append(d.pending, p...)
	n := completeLen(string(d.pending))
	out := string(d.pending[:n])
	d.pending = append(d.pending[:0], d.pending[n:]...)
	return out
}

// Flush returns the bytes held back: an incomplete character at the end of the
// stream, passed on as it is.
func (d *StreamDecoder) Flush() string {
	out := string(d.pending)
	d.pending = d.pending[:0]
	return out
}

// completeLen is the length of the longest prefix of s that does not end inside a
// UTF-8 character that the following bytes could still complete.
func completeLen(s string) int {
	// A character is at most 4 bytes: look for its first byte among the last 3.
	for i := len(s) - 1; i >= 0 && i >= len(s)-3; i-- {
		c := s[i]
		if c < 0x80 {
			return len(s) // ASCII: nothing is pending
		}
		if c >= 0xC0 { // the first byte of a sequence
			if !utf8.FullRuneInString(s[i:]) {
				return i
			}
			return len(s)
		}
	}
	return len(s)
}
