package gateway

import (
	"errors"
	"strconv"

	"github.com/lmlite/lmlite/engine"
)

// TokenIDChecker is an optional ability of an Engine (the Block and the workers have
// it): it checks token ids a request names itself against a model's vocabulary
// (engine.Block.CheckTokenIDs). Without it, logit_bias and token-id prompts are a 400
// for embedded models.
type TokenIDChecker interface {
	CheckTokenIDs(modelID string, ids []int32, check engine.TokenCheck) (int, error)
}

// checkTokenIDs checks the token ids the request names on model m: the prompt's
// (no control token but BOS) and logit_bias's (no positive bias on a control
// token): a tenant's input never becomes a control token.
func (j *job) checkTokenIDs(m *model) *apiError {
	bias, prompt := j.in.sampling.LogitBias, j.in.promptIDs
	if len(bias) == 0 && prompt == nil {
		return nil
	}
	ck, ok := j.s.eng.(TokenIDChecker)
	if !ok {
		if prompt != nil {
			return badRequest("prompt", "the model '"+m.id+"' does not take a prompt of token ids")
		}
		return badRequest("logit_bias", "the model '"+m.id+"' does not support logit_bias")
	}
	if prompt != nil {
		if i, err := ck.CheckTokenIDs(m.id, prompt, engine.PromptTokens); err != nil {
			return tokenIDError("prompt["+strconv.Itoa(i)+"]", "prompt", m, err)
		}
	}
	var ids, pos []int32
	for _, b := range bias {
		ids = append(ids, b.ID)
		if b.Bias > 0 {
			pos = append(pos, b.ID)
		}
	}
	if i, err := ck.CheckTokenIDs(m.id, ids, engine.AnyToken); err != nil {
		return tokenIDError("logit_bias["+strconv.Itoa(int(ids[i]))+"]", "logit_bias", m, err)
	}
	if i, err := ck.CheckTokenIDs(m.id, pos, engine.NoControlToken); err != nil {
		return tokenIDError("logit_bias["+strconv.Itoa(int(pos[i]))+"]", "logit_bias", m, err)
	}
	return nil
}

func tokenIDError(where, param string, m *model, err error) *apiError {
	switch {
	case errors.Is(err, engine.ErrTokenOutOfRange):
		return badRequest(param, where+": the token id is outside the vocabulary of the model '"+m.id+"'")
	case errors.Is(err, engine.ErrControlToken) && param == "logit_bias":
		return badRequest(param, where+": a positive bias on a control token of the model '"+m.id+"' is not allowed (a request's input never becomes control tokens)")
	case errors.Is(err, engine.ErrControlToken):
		return badRequest(param, where+": the token is a control token of the model '"+m.id+"'; a prompt of token ids may hold control tokens only as its BOS")
	}
	return engineError(err)
}
