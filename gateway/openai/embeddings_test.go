package openai

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine"
)

// TestEmbedInputsShapes: input is a string, strings, token ids or arrays of them;
// what is none of these, empty or too long is an error naming the item.
func TestEmbedInputsShapes(t *testing.T) {
	for _, tc := range []struct {
		in            string
		texts, arrays int
		param         string
	}{
		{`"a"`, 1, 0, ""},
		{`["a","b"]`, 2, 0, ""},
		{`[1,2,3]`, 0, 1, ""},
		{`[[1],[2,3]]`, 0, 2, ""},
		{`null`, 0, 0, "input"},
		{`[]`, 0, 0, "input"},
		{`{"a":1}`, 0, 0, "input"},
		{`["a",""]`, 0, 0, "input[1]"},
		{`[[1],[]]`, 0, 0, "input[1]"},
		{"[" + strings.Repeat(`"x",`, MaxEmbedInputs) + `"x"]`, 0, 0, "input"},
	} {
		texts, ids, ferr := EmbedInputs([]byte(tc.in))
		if tc.param != "" {
			if ferr == nil || ferr.Param != tc.param {
				t.Errorf("%.40s: error %v, want one naming %q", tc.in, ferr, tc.param)
			}
			continue
		}
		if ferr != nil || len(texts) != tc.texts || len(ids) != tc.arrays {
			t.Errorf("%s: %d texts, %d arrays, %v", tc.in, len(texts), len(ids), ferr)
		}
	}
}

// TestAppendEmbeddings: the answer is OpenAI's list, floats or base64 of
// little-endian float32s, with the usage.
func TestAppendEmbeddings(t *testing.T) {
	emb := engine.Embeddings{Vectors: [][]float32{{1, -0.5}, {0.25, 2}}, PromptTokens: 7}
	var r struct {
		Object string `json:"object"`
		Data   []struct {
			Object    string          `json:"object"`
			Index     int             `json:"index"`
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
		Model string `json:"model"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(AppendEmbeddings(nil, "m\"1", emb, false), &r); err != nil {
		t.Fatal(err)
	}
	if r.Object != "list" || len(r.Data) != 2 || r.Data[1].Index != 1 || string(r.Data[1].Embedding) != "[0.25,2]" ||
		r.Model != "m\"1" || r.Usage.PromptTokens != 7 || r.Usage.TotalTokens != 7 {
		t.Fatalf("floats: %+v", r)
	}
	if err := json.Unmarshal(AppendEmbeddings(nil, "m", emb, true), &r); err != nil {
		t.Fatal(err)
	}
	// 1.0 and -0.5 as little-endian float32: 00 00 80 3f, 00 00 00 bf.
	if got := string(r.Data[0].Embedding); got != strconv.Quote("AACAPwAAAL8=") {
		t.Fatalf("base64 = %s", got)
	}
}
