package genmodel

import (
	"fmt"
	"strings"

	"github.com/lmlite/lmlite/engine/gguf"
)

// Token types of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
const (
	tokNormal  = 1
	tokUnknown = 2
	tokControl = 3
	tokByte    = 6
)

// ChatMLTemplate is the chat template given to vocabularies that have none.
const ChatMLTemplate = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// commonWords are the word pieces of the built-in vocabulary (a leading space is
// the SentencePiece "▁").
var commonWords = strings.Fields(`the a and to was he she it of in his her they that
said with on for you is had but at one day there were Lily Tim Tom Ben Sue Anna Max mom dad
big little happy sad very time upon Once once saw wanted play played friend friends
went go going like liked love loved so not be do did can could would will have has
me my we our your them their then when what who where why how all some many more
ball dog cat bird tree park house toy toys car sun sky water fish boy girl name named
good bad new old red blue green yellow small fun run ran jump jumped look looked find
found help helped make made come came see say ask asked thank thanks yes no up down
out into from by this these those here now just too also again always never every
an are as if or because after before while about over under around away home school
food eat ate cake apple milk tea hat box book door window garden flower flowers rain
hello hi please sorry okay AI model user assistant system answer question text word
story stories world people thing things way long short fast slow hot cold warm nice
kind brave strong smart funny sleep slept night morning`)

// builtinVocab is a small SentencePiece-style vocabulary generated in code: <unk>,
// <s>, </s>, the 256 byte tokens, single characters and common word pieces (scored
// so that longer pieces win), and the ChatML control tokens. size > 0 pads it to
// that many tokens with letter sequences ("▁ab", "▁abc", ...), for the shapes of
// real vocabularies.
func builtinVocab(size int) []gguf.KV {
	tokens := []string{"<unk>", "<s>", "</s>"}
	types := []int32{tokUnknown, tokControl, tokControl}
	scores := []float32{0, 0, 0}
	for b := 0; b < 256; b++ {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, tokByte)
		scores = append(scores, 0)
	}
	// SentencePiece merges adjacent pieces whose concatenation is a token, best score
	// first (leftmost on ties): with every prefix of a word present and scored by its
	// length, a word is built up left to right into one token.
	seen := map[string]bool{}
	add := func(p string) {
		r := []rune(p)
		for n := 1; n <= len(r); n++ {
			q := string(r[:n])
			if seen[q] {
				continue
			}
			seen[q] = true
			tokens = append(tokens, q)
			types = append(types, tokNormal)
			scores = append(scores, float32(n))
		}
	}
	for _, c := range "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'\"-:;()" {
		add("▁" + string(c))
		add(string(c))
	}
	for _, w := range commonWords {
		add("▁" + w)
		add(w)
	}
	for n := 2; len(tokens)+2 < size; n++ {
		padLetters(n, func(p string) bool {
			add("▁" + p)
			return len(tokens)+2 < size
		})
	}
	for _, s := range []string{"<|im_start|>", "<|im_end|>"} {
		tokens = append(tokens, s)
		types = append(types, tokControl)
		scores = append(scores, 0)
	}
	return []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: gguf.String("llama")},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Strings(tokens)},
		{Key: "tokenizer.ggml.scores", Value: gguf.Float32s(scores)},
		{Key: "tokenizer.ggml.token_type", Value: gguf.Int32s(types)},
		{Key: "tokenizer.ggml.bos_token_id", Value: gguf.Uint32(1)},
		{Key: "tokenizer.ggml.eos_token_id", Value: gguf.Uint32(2)},
		{Key: "tokenizer.ggml.unknown_token_id", Value: gguf.Uint32(0)},
		{Key: "tokenizer.ggml.add_bos_token", Value: gguf.Bool(true)},
		{Key: "tokenizer.ggml.add_eos_token", Value: gguf.Bool(false)},
		{Key: "tokenizer.chat_template", Value: gguf.String(ChatMLTemplate)},
	}
}

// vocabFrom copies every tokenizer.* key of a GGUF file (a vocab-only GGUF or a
// model), adding the ChatML template when it has no chat template.
func vocabFrom(path string) ([]gguf.KV, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("genmodel: vocabulary: %w", err)
	}
	defer f.Close()
	var kvs []gguf.KV
	hasTemplate := false
	for _, kv := range f.KV {
		if strings.HasPrefix(kv.Key, "tokenizer.") {
			kvs = append(kvs, kv)
			hasTemplate = hasTemplate || kv.Key == "tokenizer.chat_template"
		}
	}
	if !hasTemplate {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.chat_template", Value: gguf.String(ChatMLTemplate)})
	}
	return kvs, nil
}

// withChatTemplate sets tokenizer.chat_template in kvs to tmpl.
func withChatTemplate(kvs []gguf.KV, tmpl string) []gguf.KV {
	out := make([]gguf.KV, 0, len(kvs)+1)
	for _, kv := range kvs {
		if kv.Key != "tokenizer.chat_template" {
			out = append(out, kv)
		}
	}
	return append(out, gguf.KV{Key: "tokenizer.chat_template", Value: gguf.String(tmpl)})
}

// vocabInfo is what the generator needs to know of a vocabulary: its size and the
// tokens to keep rare (control, unknown and byte tokens, end-of-generation ids), so
// that generated text is made of words and runs to its full length.
func vocabInfo(kvs []gguf.KV) (n int, rare []int, err error) {
	get := func(key string) (gguf.Value, bool) {
		for _, kv := range kvs {
			if kv.Key == key {
				return kv.Value, true
			}
		}
		return gguf.Value{}, false
	}
	tv, ok := get("tokenizer.ggml.tokens")
	toks, ok2 := tv.Strings()
	if !ok || !ok2 || len(toks) == 0 {
		return 0, nil, fmt.Errorf("genmodel: vocabulary has no tokenizer.ggml.tokens")
	}
	isRare := map[int]bool{}
	if v, ok := get("tokenizer.ggml.token_type"); ok {
		if types, ok := v.Int32s(); ok {
			for i, t := range types {
				if t == tokControl || t == tokUnknown || t == tokByte {
					isRare[i] = true
				}
			}
		}
	}
	for _, key := range []string{"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.bos_token_id"} {
		if v, ok := get(key); ok {
			if id, ok := v.Uint(); ok && id < uint64(len(toks)) {
				isRare[int(id)] = true
			}
		}
	}
	for i, s := range toks {
		switch s {
		case "<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>", "</s>", "<end_of_turn>", "<|end_of_text|>":
			isRare[i] = true
		}
	}
	for i := range toks {
		if isRare[i] {
			rare = append(rare, i)
		}
	}
	return len(toks), rare, nil
}

// padLetters calls f with every string of n lowercase letters in order until f
// returns false.
func padLetters(n int, f func(string) bool) bool {
	b := make([]byte, n)
	var rec func(i int) bool
	rec = func(i int) bool {
		if i == n {
			return f(string(b))
		}
		for c := byte('a'); c <= 'z'; c++ {
			b[i] = c
			if !rec(i + 1) {
				return false
			}
		}
		return true
	}
	return rec(0)
}
