package engine

import (
	"fmt"

	"github.com/lmlite/lmlite/engine/tokenizer"
)

// CheckTokenIDs checks token ids a request names itself (a prompt given as token
// ids, logit_bias's keys) against the model's vocabulary. It returns the index of the
// first id at fault and ErrTokenOutOfRange for an id outside the vocabulary, or
// ErrControlToken for an id of a control or end-of-generation token that check
// refuses (a tenant's input never becomes the template's markup or an end of turn;
// PromptTokens allows BOS, which starts a prompt as the tokenizer adds it).
func (b *Block) CheckTokenIDs(modelID string, ids []int32, check TokenCheck) (int, error) {
	in, ok := b.models[modelID]
	if !ok {
		return -1, fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	return checkTokenIDs(in.tok, ids, check)
}

// CheckTokenIDs is Block.CheckTokenIDs for this model.
func (p *Prep) CheckTokenIDs(ids []int32, check TokenCheck) (int, error) {
	return checkTokenIDs(p.tok, ids, check)
}

func checkTokenIDs(tok *tokenizer.Tokenizer, ids []int32, check TokenCheck) (int, error) {
	n := tok.VocabSize()
	for i, id := range ids {
		if id < 0 || int(id) >= n {
			return i, fmt.Errorf("%w: %d (the vocabulary has %d tokens)", ErrTokenOutOfRange, id, n)
		}
		if check == AnyToken || check == PromptTokens && id == tok.BOS() {
			continue
		}
		if tok.Type(id) == tokenizer.TypeControl || tok.IsEOG(id) {
			return i, fmt.Errorf("%w: %d (%q)", ErrControlToken, id, tok.TokenText(id))
		}
	}
	return -1, nil
}
