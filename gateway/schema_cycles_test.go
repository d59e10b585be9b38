package gateway

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// cyclicSchemas are the schemas of issue 30: $refs and anyOfs that cycle without
// writing a byte. Each one crashed the server (a stack overflow in the matcher).
var cyclicSchemas = []string{
	`{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
	`{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
	`{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"string"}]}},"$ref":"#/$defs/a"}`,
	`{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"}`,
	`{"$ref":"#"}`,
}

// cyclicBodies are chat bodies carrying schema: as response_format (strict and
// not) and as a tool's parameters under tool_choice required, with the field a 400
// must name.
func cyclicBodies(schema string) []struct{ name, body, param string } {
	const head = `{"model":"tiny","max_tokens":8,"messages":[{"role":"user","content":"hi"}],`
	return []struct{ name, body, param string }{
		{"strict", head + `"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":` + schema + `}}}`, "response_format.json_schema.schema"},
		{"not strict", head + `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + schema + `}}}`, "response_format.json_schema.schema"},
		{"tool", head + `"tools":[{"type":"function","function":{"name":"f","parameters":` + schema + `}}],"tool_choice":"required"}`, "tools[0].function.parameters"},
	}
}

// TestCyclicSchemaIs400StrictOrNot: a schema that cycles without writing is a 400
// naming the field on the real engine, strict or not (not strict, an unsupported
// schema falls back to any JSON object, but a cyclic one describes no value), and
// the server serves the next request.
func TestCyclicSchemaIs400StrictOrNot(t *testing.T) {
	es := startEngineServer(t)
	for _, s := range cyclicSchemas {
		for _, tc := range cyclicBodies(s) {
			code, body := postJSON(t, es.url+"/chat/completions", es.key, tc.body)
			if code != 400 || !strings.Contains(body, `"param":"`+tc.param+`"`) || !strings.Contains(body, "cycle") {
				t.Errorf("%s %s: %d %s", tc.name, s, code, body)
			}
		}
	}
	code, body := postJSON(t, es.url+"/chat/completions", es.key, `{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`)
	if code != 200 {
		t.Fatalf("a plain request after: %d %s", code, body)
	}
}

// TestBatchCheckRefusesCyclicSchemas: the Batch API's validation (Server.Check, run
// on every line at create time) refuses the same schemas with the same field, so
// such a line fails validation instead of reaching an engine.
func TestBatchCheckRefusesCyclicSchemas(t *testing.T) {
	es := startEngineServer(t)
	for _, s := range cyclicSchemas {
		for _, tc := range cyclicBodies(s) {
			_, err := es.srv.Check("acme", "/v1/chat/completions", []byte(tc.body))
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != 400 || ae.param != tc.param {
				t.Errorf("%s %s: %v", tc.name, s, err)
			}
		}
	}
	tree := `{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"}}}}`
	for _, tc := range cyclicBodies(tree) {
		if _, err := es.srv.Check("acme", "/v1/chat/completions", []byte(tc.body)); err != nil {
			t.Errorf("%s: a tree schema refused: %v", tc.name, err)
		}
	}
}

func postJSON(t *testing.T, url, key, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDeepJSONIs400: JSON nested far deeper than any limit, in a message's content,
// a tool's parameters or a response_format schema, is never a stack overflow: the
// request decoder refuses 10,000 levels (400); below that, a tool's parameters
// rendered into the template stop at 128 levels and a schema at 256 levels of JSON or
// 128 of subschemas (400; a schema that is not strict falls back to any JSON object,
// as for any schema outside the subset; an unknown member of a content part is
// skipped), and the server serves the next request.
func TestDeepJSONIs400(t *testing.T) {
	es := startEngineServer(t)
	deep := func(n int) string { return strings.Repeat(`{"a":`, n) + `1` + strings.Repeat(`}`, n) }
	const head = `{"model":"tiny","max_tokens":4,`
	for _, n := range []int{300, 5000, 20000} {
		decoded := 200 // what a body whose depth the decoder takes is answered when nothing else refuses it
		if n > 10000 {
			decoded = 400
		}
		for _, tc := range []struct {
			name, body string
			code       int
		}{
			{"content part", head + `"messages":[{"role":"user","content":[{"type":"text","text":"x","x":` + deep(n) + `}]}]}`, decoded},
			{"tool auto", head + `"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":` + deep(n) + `}}]}`, 400},
			{"tool required", head + `"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":` + deep(n) + `}}],"tool_choice":"required"}`, 400},
			{"strict schema", head + `"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":` + deep(n) + `}}}`, 400},
			{"schema", head + `"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"p":` +
				strings.Repeat(`{"type":"object","additionalProperties":`, n) + `{}` + strings.Repeat(`}`, n) + `}}}}}`, decoded},
		} {
			if code, got := postJSON(t, es.url+"/chat/completions", es.key, tc.body); code != tc.code {
				t.Errorf("%s, depth %d: %d %.300s", tc.name, n, code, got)
			}
		}
	}
	if code, got := postJSON(t, es.url+"/chat/completions", es.key, head+`"messages":[{"role":"user","content":"hi"}]}`); code != 200 {
		t.Fatalf("a plain request after: %d %s", code, got)
	}
}
