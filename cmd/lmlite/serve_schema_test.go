package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
)

// TestServeSurvivesCyclicSchemas runs `lmlite serve` in a process of its own (this
// test binary re-executed, a generated tiny model) and sends it the schemas of issue
// 30, whose $refs cycle without writing a byte: as response_format (strict and not)
// and as a tool's parameters under tool_choice required. Each one overflowed the
// matcher's stack, a fatal error no recover catches, and the process died with every
// tenant's streams. Now each is a 400 naming the field, the process is still
// running, and it serves a plain request after them.
func TestServeSurvivesCyclicSchemas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an lmlite process")
	}
	dir := t.TempDir()
	t.Setenv("LMLITE_RUN_DIR", filepath.Join(dir, "run"))
	t.Setenv("LMLITE_TEST_ADMIN_KEY", "admin-secret")
	model := filepath.Join(dir, "tiny.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 1}, model); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "lmlite.yaml")
	os.WriteFile(cfg, []byte(`
listen: `+addr+`
data_dir: `+data+`
admin_key_env: LMLITE_TEST_ADMIN_KEY
ledger: {sync: process}
models:
  - {id: tiny, path: `+model+`, max_model_len: 1024, idle_timeout: -1s, prompt_usd_per_1k: 1, completion_usd_per_1k: 1}
tiers: {fast: [{model: tiny}]}
plans: {open: {}}
tenants:
  - {id: acme, plan: open}
`), 0o644)
	p := startLmlite(t, cfg, addr, data)
	p.waitReady(t)
	code, _, b := doReq(t, "POST", p.base+"/admin/keys", "admin-secret", `{"tenant":"acme"}`)
	var k struct{ Key string }
	if err := json.Unmarshal([]byte(b), &k); code != 200 || err != nil || k.Key == "" {
		t.Fatalf("create key: %d %s", code, b)
	}
	alive := func(after string) {
		t.Helper()
		select {
		case err := <-p.done:
			p.done <- err
			log, _ := os.ReadFile(p.log)
			t.Fatalf("the server died after %s: %v\n%s", after, err, tail(string(log), 40))
		default:
		}
	}
	const head = `{"model":"tiny","max_tokens":8,"messages":[{"role":"user","content":"hi"}],`
	for _, schema := range []string{
		`{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
		`{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
		`{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"string"}]}},"$ref":"#/$defs/a"}`,
		`{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"}`,
		`{"$ref":"#"}`,
	} {
		for _, tc := range []struct{ name, body, param string }{
			{"strict", head + `"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":` + schema + `}}}`, "response_format.json_schema.schema"},
			{"not strict", head + `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + schema + `}}}`, "response_format.json_schema.schema"},
			{"tool", head + `"tools":[{"type":"function","function":{"name":"f","parameters":` + schema + `}}],"tool_choice":"required"}`, "tools[0].function.parameters"},
		} {
			code, _, b := doReq(t, "POST", p.base+"/v1/chat/completions", k.Key, tc.body)
			alive(tc.name + " " + schema)
			if code != 400 || !strings.Contains(b, `"param":"`+tc.param+`"`) {
				t.Errorf("%s %s: %d %s", tc.name, schema, code, b)
			}
		}
	}
	code, _, b = doReq(t, "POST", p.base+"/v1/chat/completions", k.Key, head+`"stream":false}`)
	alive("a plain request")
	if code != 200 || !strings.Contains(b, `"finish_reason"`) {
		t.Fatalf("a plain request after them: %d %s", code, b)
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
