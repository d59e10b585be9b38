package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The schemas zod writes for
//
//	z.object({
//		name: z.string().max(20),
//		age: z.number().int().min(0).max(120),
//		role: z.enum(["admin", "user"]),
//		email: z.string().email(), // zod v4: z.email()
//		nickname: z.string().max(12).optional(),
//	}).strict()
//
// zodV3 as zod-to-json-schema writes it (LangChain's withStructuredOutput with zod 3),
// zodV4 as zod v4's toJSONSchema does (its email pattern starts with lookaheads).
// Issue 31: both were a 400 (unsupported JSON schema keyword "minimum").
const (
	zodV3 = `{"type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":0,"maximum":120},"role":{"type":"string","enum":["admin","user"]},"email":{"type":"string","format":"email"},"nickname":{"type":"string","maxLength":12}},"required":["name","age","role","email"],"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"}`
	zodV4 = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":0,"maximum":120},"role":{"type":"string","enum":["admin","user"]},"email":{"type":"string","format":"email","pattern":"^(?!\\.)(?!.*\\.\\.)([A-Za-z0-9_'+\\-\\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"},"nickname":{"type":"string","maxLength":12}},"required":["name","age","role","email"],"additionalProperties":false}`
)

type ecmaRegexp regexp2.Regexp

func (re *ecmaRegexp) MatchString(s string) bool {
	ok, err := (*regexp2.Regexp)(re).MatchString(s)
	return err == nil && ok
}

func (re *ecmaRegexp) String() string { return (*regexp2.Regexp)(re).String() }

// strictValidator compiles schema with formats asserted and patterns as ECMA-262
// reads them (lookaheads included).
func strictValidator(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.UseRegexpEngine(func(s string) (jsonschema.Regexp, error) {
		re, err := regexp2.Compile(s, regexp2.ECMAScript)
		if err != nil {
			return nil, err
		}
		return (*ecmaRegexp)(re), nil
	})
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestZodSchemasThroughClientShapes: zod's schemas (integer bounds, an enum, optional
// fields, an email, additionalProperties false, $schema) sent as LangChain sends them
// (response_format json_schema, strict) and as the AI SDK's generateObject does
// (response_format json_schema not strict, and as a tool under tool_choice required)
// on the real engine: 200, and the output parses and validates.
func TestZodSchemasThroughClientShapes(t *testing.T) {
	es := startEngineServer(t)
	const head = `{"model":"tiny","max_tokens":300,"seed":3,"temperature":0.7,"messages":[{"role":"user","content":"Extract the person: Ann, 34, admin, ann@example.com"}],`
	for name, schema := range map[string]string{"zod3": zodV3, "zod4": zodV4} {
		v := strictValidator(t, schema)
		for _, tc := range []struct{ shape, body string }{
			{"langchain", head + `"response_format":{"type":"json_schema","json_schema":{"name":"extract","description":"A person","strict":true,"schema":` + schema + `}}}`},
			{"ai-sdk", head + `"response_format":{"type":"json_schema","json_schema":{"name":"response","strict":false,"schema":` + schema + `}}}`},
			{"ai-sdk tool", head + `"tools":[{"type":"function","function":{"name":"json","description":"Respond with a JSON object.","strict":false,"parameters":` + schema + `}}],"tool_choice":"required"}`},
		} {
			code, body := postJSON(t, es.url+"/chat/completions", es.key, tc.body)
			if code != 200 {
				t.Fatalf("%s %s: %d %s", name, tc.shape, code, body)
			}
			var resp struct {
				Choices []struct {
					FinishReason string `json:"finish_reason"`
					Message      struct {
						Content   string `json:"content"`
						ToolCalls []struct {
							Function struct{ Arguments string } `json:"function"`
						} `json:"tool_calls"`
					} `json:"message"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(body), &resp); err != nil || len(resp.Choices) != 1 {
				t.Fatalf("%s %s: %v %s", name, tc.shape, err, body)
			}
			c := resp.Choices[0]
			out := c.Message.Content
			if strings.HasSuffix(tc.shape, "tool") {
				if len(c.Message.ToolCalls) != 1 {
					t.Fatalf("%s %s: no tool call: %s", name, tc.shape, body)
				}
				out = c.Message.ToolCalls[0].Function.Arguments
			}
			if c.FinishReason != "stop" && c.FinishReason != "tool_calls" {
				t.Fatalf("%s %s: finish %q: %s", name, tc.shape, c.FinishReason, body)
			}
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
			if err != nil {
				t.Fatalf("%s %s: output %q does not parse: %v", name, tc.shape, out, err)
			}
			if err := v.Validate(inst); err != nil {
				t.Fatalf("%s %s: output %q does not validate: %v", name, tc.shape, out, err)
			}
			t.Logf("%s %s: %s", name, tc.shape, out)
		}
	}
}
