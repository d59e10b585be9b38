package openai

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"strconv"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/core"
	"github.com/lmlite/lmlite/internal/jsonenc"
)

// This file is OpenAI's embeddings API on the wire: the body of POST /v1/embeddings,
// its input's shapes, and the answer. The gateway's handler (gateway/embeddings.go)
// admits, routes, charges and runs it.

// MaxEmbedInputs is the most inputs one embeddings request may hold (OpenAI's limit).
const MaxEmbedInputs = 2048

// EmbeddingRequest is the body of POST /v1/embeddings.
type EmbeddingRequest struct {
	Model          string         `json:"model"`
	Input          jsontext.Value `json:"input"`
	EncodingFormat string         `json:"encoding_format"`
	Dimensions     *int           `json:"dimensions"`
	User           string         `json:"user"`
}

// EmbedInputs reads input: a string, an array of strings, an array of token ids or
// an array of arrays of token ids. Strings come back in texts (to tokenize), token
// arrays in ids; exactly one of them is set.
func EmbedInputs(raw jsontext.Value) (texts []string, ids [][]int32, ferr *core.FieldError) {
	if core.IsNull(raw) {
		return nil, nil, core.Bad("input", "you must provide an input")
	}
	// Each shape decoded into a fresh value: a failed decoding may leave a partial one.
	var one string
	var many []string
	var flat []int32
	switch {
	case jsonv2.Unmarshal(raw, &one) == nil:
		texts = []string{one}
	case jsonv2.Unmarshal(raw, &many) == nil:
		texts = many
	case jsonv2.Unmarshal(raw, &flat) == nil:
		ids = [][]int32{flat}
	default:
		var nested [][]int32
		if jsonv2.Unmarshal(raw, &nested) != nil {
			return nil, nil, core.Bad("input", "input must be a string, an array of strings, an array of token ids or an array of arrays of token ids")
		}
		ids = nested
	}
	n := len(texts) + len(ids)
	if n == 0 {
		return nil, nil, core.Bad("input", "input must not be empty")
	}
	if n > MaxEmbedInputs {
		return nil, nil, core.Bad("input", "input may hold at most "+strconv.Itoa(MaxEmbedInputs)+" items")
	}
	for i, t := range texts {
		if t == "" {
			return nil, nil, core.Bad("input["+strconv.Itoa(i)+"]", "input cannot be an empty string")
		}
	}
	for i, p := range ids {
		if len(p) == 0 {
			return nil, nil, core.Bad("input["+strconv.Itoa(i)+"]", "input cannot be an empty array")
		}
	}
	return texts, ids, nil
}

// AppendEmbeddings appends OpenAI's embeddings response: a list of
// {"object":"embedding","index","embedding"} (floats, or base64 of little-endian
// float32s) and the usage.
func AppendEmbeddings(b []byte, model string, emb engine.Embeddings, b64 bool) []byte {
	b = append(b, `{"object":"list","data":[`...)
	var raw []byte
	for i, v := range emb.Vectors {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"object":"embedding","index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"embedding":`...)
		if b64 {
			raw = raw[:0]
			for _, f := range v {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
			}
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, raw)
			b = append(b, '"')
		} else {
			b = append(b, '[')
			for k, f := range v {
				if k > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendFloat(b, float64(f), 'g', -1, 32)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	b = append(b, `],"model":`...)
	b = jsonenc.AppendString(b, model)
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(emb.PromptTokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(emb.PromptTokens), 10)
	return append(b, "}}"...)
}
