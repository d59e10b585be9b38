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
	return chatTokens(in.tok, in.tmpl, msgs)
}

// chatTokens is ChatTokens for one tokenizer and template.
func chatTokens(tok *tokenizer.Tokenizer, tmpl *chat.Template, msgs []Message) ([]int32, error) {
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
	ids := q.Encode(text, false)
	if bos := tok.BOS(); tok.AddBOS() && bos >= 0 && (len(ids) == 0 || ids[0] != bos) {
		ids = append([]int32{bos}, ids...)
	}
	return ids, nil
}
