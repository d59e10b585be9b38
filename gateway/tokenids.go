package gateway

import (
	"errors"
	"math"
	"slices"
	"strconv"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/lmlite/lmlite/engine"
)

// TokenIDChecker is an optional ability of an Engine (the Block and the workers have
// it): it checks token ids a request names itself against a model's vocabulary
// (engine.Block.CheckTokenIDs). Without it, logit_bias and token-id prompts are a 400
// for embedded models.
type TokenIDChecker interface {
	CheckTokenIDs(modelID string, ids []int32, check engine.TokenCheck) (int, error)
}

// maxLogitBias is the most entries logit_bias may hold (OpenAI's limit).
const maxLogitBias = 300

// parseLogitBias reads logit_bias: an object from token ids (decimal strings, as
// OpenAI's) to a bias in [-100, 100]. The result is sorted by id. Whether the ids
// are in a model's vocabulary is checked per model (checkTokenIDs).
func parseLogitBias(raw jsontext.Value) ([]engine.TokenBias, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var m map[string]float64
	if err := jsonv2.Unmarshal(raw, &m); err != nil {
		return nil, badRequest("logit_bias", "logit_bias must be an object from token ids to numbers between -100 and 100")
	}
	if len(m) > maxLogitBias {
		return nil, badRequest("logit_bias", "logit_bias may hold at most "+strconv.Itoa(maxLogitBias)+" tokens")
	}
	out := make([]engine.TokenBias, 0, len(m))
	for k, v := range m {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil || id < 0 {
			return nil, badRequest("logit_bias", "logit_bias: '"+truncate(k, 32)+"' is not a token id (a non-negative integer)")
		}
		if !(v >= -100 && v <= 100) || math.IsNaN(v) {
			return nil, badRequest("logit_bias", "logit_bias: the bias of token "+k+" must be between -100 and 100")
		}
		out = append(out, engine.TokenBias{ID: int32(id), Bias: float32(v)})
	}
	slices.SortFunc(out, func(a, b engine.TokenBias) int { return int(a.ID - b.ID) })
	return out, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// parsePromptIDs reads a prompt given as token ids: an array of integers, or an
// array holding one such array (several prompts are refused, as several strings
// are). ok is false when the prompt is not of this shape (a string, strings).
func parsePromptIDs(raw jsontext.Value) (ids []int32, ok bool, aerr *apiError) {
	var one []int64
	if jsonv2.Unmarshal(raw, &one) != nil {
		var many [][]int64
		if jsonv2.Unmarshal(raw, &many) != nil {
			return nil, false, nil
		}
		if len(many) != 1 {
			return nil, true, badRequest("prompt", "a prompt array must hold exactly one prompt (batched prompts are not supported)")
		}
		one = many[0]
	}
	if len(one) == 0 {
		return nil, true, badRequest("prompt", "a prompt of token ids must hold at least one token")
	}
	ids = make([]int32, len(one))
	for i, x := range one {
		if x < 0 || x > math.MaxInt32 {
			return nil, true, badRequest("prompt", "prompt["+strconv.Itoa(i)+"]: "+strconv.FormatInt(x, 10)+" is not a token id")
		}
		ids[i] = int32(x)
	}
	return ids, true, nil
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
