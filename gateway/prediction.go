package gateway

import (
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Predicted Outputs (OpenAI's prediction on chat completions, and the same field on
// completions): {"type": "content", "content": a string or an array of text parts},
// the output the client expects, as in code editing. The engine drafts from it
// (engine.Request.Prediction) and verifies the drafts in the batched step, so the
// output is the one the request gives without it, bit for bit; only the speed
// changes. OpenAI refuses a prediction with n > 1, logprobs, presence or frequency
// penalties > 0, audio, tools and max_completion_tokens (its drafts would change
// what those report); lmlite accepts it with all of them, since its output does not
// depend on the prediction.

// noSpeculation is the request's "lmlite": {"speculative": false}: decode plainly,
// without drafts from any source (its prediction, prompt lookup, the tenant's pool).
// The output is the same either way.
func noSpeculation(p *commonParams) bool {
	return p.LMLite != nil && p.LMLite.Speculative != nil && !*p.LMLite.Speculative
}

// predictionParam is the decoded prediction object.
type predictionParam struct {
	Type    string         `json:"type"`
	Content jsontext.Value `json:"content"`
}

// parsePrediction decodes a request's prediction member (absent or null: ""), its
// errors naming the member at fault (prediction, prediction.type,
// prediction.content, prediction.content[i].type).
func parsePrediction(raw jsontext.Value) (string, *apiError) {
	if isNull(raw) {
		return "", nil
	}
	var p predictionParam
	if err := jsonv2.Unmarshal(raw, &p, strictJSON); err != nil {
		return "", badRequest("prediction", "prediction must be an object {\"type\": \"content\", \"content\": string or array of text parts}")
	}
	if p.Type != "content" {
		return "", badRequest("prediction.type", "prediction.type must be 'content'")
	}
	if isNull(p.Content) {
		return "", badRequest("prediction.content", "prediction.content is required: a string or an array of text parts")
	}
	var s string
	if jsonv2.Unmarshal(p.Content, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := jsonv2.Unmarshal(p.Content, &parts, strictJSON); err != nil {
		return "", badRequest("prediction.content", "prediction.content must be a string or an array of text parts")
	}
	var b strings.Builder
	for i, part := range parts {
		if part.Type != "text" {
			return "", badRequest("prediction.content["+strconv.Itoa(i)+"].type", "a prediction's content parts must have type 'text'")
		}
		b.WriteString(part.Text)
	}
	return b.String(), nil
}
