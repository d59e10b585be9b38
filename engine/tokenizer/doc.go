// Package tokenizer turns text into the token ids of a GGUF model's vocabulary and
// back, with the behaviour of llama.cpp's tokenizer for the same file.
//
// # Building
//
// FromGGUF reads the tokenizer.ggml.* metadata (tokens, scores, token types, merges,
// special ids, add_bos_token, add_space_prefix, pre) of an open gguf.File; it needs
// no tensors, so vocabulary-only files work. Two tokenizer models exist:
//
//   - "llama": SentencePiece-style BPE (Llama 2, Phi-3, TinyStories). A space is
//     prefixed to the text (add_space_prefix, default true) and after every special
//     token, spaces become '▁', and the neighbouring pair whose join is the
//     highest-scoring token merges first, until none is left; characters that end up
//     in no token are spelled in byte tokens <0xXX>.
//   - "gpt2": byte-level BPE (Llama 3, Qwen2/3, GPT-2, DeepSeek, Falcon, MPT,
//     StarCoder, Refact). The pre-tokenizer that tokenizer.ggml.pre names splits the
//     text into words with llama.cpp's regular expressions (pretok.go; run by
//     github.com/dlclark/regexp2, which has the lookahead they need, or by
//     hand-written matchers for GPT-2's and Llama 3's); each word's bytes
//     are spelled in GPT-2's byte-to-unicode alphabet and merged by the ranks of
//     tokenizer.ggml.merges, lowest rank first.
//
// Both merge loops use a priority queue over a linked list of symbols, so encoding is
// O(n log n) in the length of a word (a SentencePiece text is one word).
//
// # Special tokens
//
// Before either model runs, the text is cut at the texts of special tokens, longest
// first (llama.cpp's tokenizer_st_partition). Control tokens (<|im_start|>, <s> ...)
// are cut out only when Encode is asked to parse special tokens; user-defined tokens
// always are, as in llama.cpp and Hugging Face tokenizers. Tokens that llama.cpp
// recognises by their text (EOT, FIM and end-of-generation tokens such as
// <|im_end|>, <|eot_id|>, <|end|>, </s>) become control tokens, and IsEOG reports
// them; except that a token the vocabulary's types call normal stays normal (it
// still ends generation): its text merely looks special, like Qwen2's "</s>", and
// parsing special tokens leaves it alone. llama.cpp makes it a control token; the
// model's own Hugging Face tokenizer does not. For Phi-3 (general.name), special
// tokens swallow the whitespace after them.
//
// # Quoted prompts
//
// A chat prompt mixes the template's markup, whose special-token texts must become
// control tokens, with texts from a request, which must stay plain text whatever
// they spell ("<|im_end|><|im_start|>system ..." forges a turn otherwise). A Quoter
// (NewQuoter, one per prompt) quotes each request text before the template renders
// it: a private-use character free in the prompt (the mark) goes after the first
// character of every control- or unknown-token text in it, and at its edges where
// the markup beside it could complete one. Quoter.Encode parses the rendered prompt's
// special tokens, which can now come only from the markup, and encodes every raw
// piece holding a mark, marks removed, as plain text: a quoted text alone encodes
// exactly as Encode(text, false, false) (TestQuotedTextIsPlain, FuzzQuote). Texts
// without control-token texts are left as they are, so the template sees them as
// written. engine.Block.ChatTokens uses this for every chat.
//
// # Decoding
//
// A token's text (its piece) is what llama.cpp's token_to_piece gives without
// special tokens: nothing for control and unknown tokens, the text of user-defined
// ones, the byte of a byte token, '▁' turned back into a space, GPT-2's alphabet
// turned back into bytes. A StreamDecoder joins pieces and holds back the bytes of a
// UTF-8 character until it is complete, so a stream of ids never yields half a
// character; Decode is a StreamDecoder run over all ids. For SentencePiece the
// prefixed space is dropped from the first piece of a text (after BOS), so
// Decode(Encode(s)) == s; a decoder continuing a prompt is told so with Prime.
// llama.cpp's detokenize clean-up of spaces before punctuation (clean_spaces) is not
// applied: pieces are concatenated exactly, which is what streaming needs.
//
// # Checks
//
// The tests run llama.cpp's test-tokenizer-0 vectors for eleven vocabularies from
// ../shared/testdata/tokenizer, decode llama2.c's greedy stories260K run, and compare
// the ids of a few hundred generated texts (whitespace of every kind, scripts, emoji,
// special-token texts), with and without special tokens, with llama.cpp's for all
// eleven vocabularies (TestLlamaCppParity, through the peer in ../shared/peers;
// texts holding Qwen2's "</s>" only without). TestLooksSpecialStaysNormal checks
// that no token a vocabulary calls normal is parsed as special.
// FuzzEncodeDecode checks round trips on vocabularies built in the test, and
// FuzzFromGGUF that no metadata makes building or encoding panic.
//
//	f, _ := gguf.Open("model.gguf")
//	tok, _ := tokenizer.FromGGUF(f)
//	ids := tok.Encode("Hello world", tok.AddBOS(), false)
//	d := tok.NewDecoder()
//	for _, id := range ids {
//		fmt.Print(d.Next(id))
//	}
//	fmt.Print(d.Flush())
//
// A Tokenizer is immutable and safe for concurrent use; a StreamDecoder is not.
package tokenizer
