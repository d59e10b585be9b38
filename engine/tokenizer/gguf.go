package tokenizer

import (
	"fmt"

	"github.com/lmlite/lmlite/engine/gguf"
)

// FromGGUF builds the tokenizer that a GGUF file's tokenizer.ggml.* metadata
// describe. It reads only metadata, so vocabulary-only files work too.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	s := newSpec()
	var ok bool
	if s.model, ok = f.GetString("tokenizer.ggml.model"); !ok {
		return nil, fmt.Errorf("%w: no tokenizer.ggml.model", ErrInvalid)
	}
	s.pre, _ = f.GetString("tokenizer.ggml.pre")
	s.name, _ = f.GetString("general.name")
	v, ok := f.Get("tokenizer.ggml.tokens")
	if !ok {
		return nil, fmt.Errorf("%w: no tokenizer.ggml.tokens", ErrInvalid)
	}
	if s.tokens, ok = v.Strings(); !ok {
		return nil, fmt.Errorf("%w: tokenizer.ggml.tokens is not an array of strings", ErrInvalid)
	}
	if v, ok := f.Get("tokenizer.ggml.scores"); ok {
		if s.scores, ok = v.Float32s(); !ok {
			return nil, fmt.Errorf("%w: tokenizer.ggml.scores is not an array of floats", ErrInvalid)
		}
	}
	if v, ok := f.Get("tokenizer.ggml.token_type"); ok {
		types, ok := v.Int32s()
		if !ok {
			return nil, fmt.Errorf("%w: tokenizer.ggml.token_type is not an array of integers", ErrInvalid)
		}
		s.types = make([]TokenType, len(types))
		for i, ty := range types {
			s.types[i] = TokenType(ty)
		}
	}
	if v, ok := f.Get("tokenizer.ggml.merges"); ok {
		if s.merges, ok = v.Strings(); !ok {
			return nil, fmt.Errorf("%w: tokenizer.ggml.merges is not an array of strings", ErrInvalid)
		}
	}
	for _, k := range []struct {
		key string
		dst *int64
	}{
		{"bos_token_id", &s.bos}, {"eos_token_id", &s.eos}, {"unknown_token_id", &s.unk},
		{"eot_token_id", &s.eot}, {"eom_token_id", &s.eom},
		{"fim_pre_token_id", &s.fimPre}, {"fim_suf_token_id", &s.fimSuf}, {"fim_mid_token_id", &s.fimMid},
		{"fim_pad_token_id", &s.fimPad}, {"fim_rep_token_id", &s.fimRep}, {"fim_sep_token_id", &s.fimSep},
	} {
		// An id that does not fit (such as uint32 -1 for "none") stays absent.
		if u, ok := f.GetUint("tokenizer.ggml." + k.key); ok && u < 1<<31 {
			*k.dst = int64(u)
		}
	}
	for _, k := range []struct {
		key string
		dst **bool
	}{
		{"add_bos_token", &s.addBOS}, {"add_eos_token", &s.addEOS}, {"add_space_prefix", &s.addSpacePrefix},
	} {
		if b, ok := f.GetBool("tokenizer.ggml." + k.key); ok {
			*k.dst = &b
		}
	}
	return build(s)
}
