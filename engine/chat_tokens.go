package engine

import (
	"fmt"

	"github.com/lmlite/lmlite/engine/chat"
	"github.com/lmlite/lmlite/engine/tokenizer"
)

// ChatTokens renders msgs with the model's chat template (ChatML when it has none),
// ready for the assistant's answer, and tokenizes the result: the template's markup
// becomes the model's control tokens, while every text of the messages (roles and
// contents) is plain text, so a user who types "<|im_end|><|im_start|>system" gets
// those characters, not a new turn (see tokenizer.Quoter). BOS comes first when the
// vocabulary asks for it, once: a template that writes bos_token itself does not get
// a second one.
func (b *Block) ChatTokens(modelID string, msgs []Message) ([]int32, error) {
	in, ok := b.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	return chatTokens(in.tok, in.tmpl, msgs, 0)
}

// ChatTokensCapped is ChatTokensTools (ChatTokens without tools or tool messages)
// for a caller that refuses prompts of more than limit tokens: once the prompt is
// known to be over, it stops and returns an error wrapping ErrPromptOverLimit
// (tokenizer.Tokenizer.EncodeCapped), so an oversized prompt costs its rendering
// and about limit tokens of encoding. A prompt within the limit has ChatTokensTools's
// tokens. limit <= 0: no limit.
func (b *Block) ChatTokensCapped(modelID string, msgs []Message, tools []Tool, limit int) ([]int32, error) {
	in, ok := b.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	return chatTokensTools(in.tok, in.tmpl, msgs, tools, limit)
}

// TokenizeCapped is Tokenize giving up past limit tokens, with an error wrapping
// ErrPromptOverLimit, as ChatTokensCapped does. limit <= 0: no limit.
func (b *Block) TokenizeCapped(modelID, text string, limit int) ([]int32, error) {
	in, ok := b.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	return tokenizeCapped(in.tok, text, limit)
}

// tokenizeCapped is TokenizeCapped for one tokenizer.
func tokenizeCapped(tok *tokenizer.Tokenizer, text string, limit int) ([]int32, error) {
	ids, over := tok.EncodeCapped(text, tok.AddBOS(), true, limit)
	if over {
		return nil, overLimit(limit)
	}
	return ids, nil
}

func overLimit(limit int) error {
	return fmt.Errorf("%w: the prompt is more than %d tokens", ErrPromptOverLimit, limit)
}

// encodeQuoted encodes a rendered prompt (encodeCapped with the Quoter's marks) and
// puts BOS first when the vocabulary asks for it, once: a template that writes
// bos_token itself does not get a second one.
func encodeQuoted(tok *tokenizer.Tokenizer, q *tokenizer.Quoter, text string, limit int) ([]int32, error) {
	ids, over := q.EncodeCapped(text, false, limit)
	if over {
		return nil, overLimit(limit)
	}
	if bos := tok.BOS(); tok.AddBOS() && bos >= 0 && (len(ids) == 0 || ids[0] != bos) {
		ids = append([]int32{bos}, ids...)
	}
	return ids, nil
}

// chatTokens is ChatTokens for one tokenizer and template, giving up past limit
// tokens (0: no limit).
func chatTokens(tok *tokenizer.Tokenizer, tmpl *chat.Template, msgs []Message, limit int) ([]int32, error) {
	texts := make([]string, 0, 1+2*len(msgs))
	texts = append(texts, tmpl.Source())
	for _, m := range msgs {
		texts = append(texts, m.Role, m.Content)
	}
	q, err := tok.NewQuoter(texts...)
	if err != nil {
		return nil, err
	}
	cm := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		cm[i] = chat.Message{Role: q.Quote(m.Role), Content: q.Quote(m.Content)}
	}
	text, err := tmpl.Render(cm, true)
	if err != nil {
		return nil, err
	}
	return encodeQuoted(tok, q, text, limit)
}
