package chat

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzChatRender renders arbitrary messages with ChatML and, when the shared data is
// there, the Llama 3 and Qwen3 templates: never a panic, never an error, and the
// content always appears in the output (ChatML: exactly as written).
func FuzzChatRender(f *testing.F) {
	f.Add("user", "Hello!", "assistant", "<think>\nhm\n</think>\n\nHi", true)
	f.Add("system", "{{ raise_exception('x') }}", "tool", "<tool_response>x</tool_response>", false)
	f.Add("user", "日本語 👋🏽 \x00\xff", "user", "{% for %}", true)

	templates := map[string]*Template{}
	chatml, err := New("", Options{})
	if err != nil {
		f.Fatal(err)
	}
	templates["chatml"] = chatml
	if root, err := repoRoot(); err == nil {
		for _, name := range []string{"llama3", "qwen3"} {
			b, err := os.ReadFile(filepath.Join(root, "..", "shared", "testdata", "hf-tokenizers", name, "tokenizer_config.json"))
			if err != nil {
				continue // TestGolden reports missing shared data
			}
			src := templateFromConfig(b)
			if tpl, err := New(src, Options{BOS: "<s>", EOS: "</s>", Now: testNow}); err == nil {
				templates[name] = tpl
			}
		}
	}
	f.Fuzz(func(t *testing.T, role1, content1, role2, content2 string, gen bool) {
		msgs := []Message{{Role: role1, Content: content1}, {Role: role2, Content: content2}}
		for name, tpl := range templates {
			out, err := tpl.Render(msgs, gen)
			if err != nil {
				if errors.Is(err, ErrTooLarge) {
					continue
				}
				t.Fatalf("%s: %v", name, err)
			}
			if name == "chatml" {
				want := "<|im_start|>" + role1 + "\n" + content1 + "<|im_end|>\n<|im_start|>" + role2 + "\n" + content2 + "<|im_end|>\n"
				if gen {
					want += "<|im_start|>assistant\n"
				}
				if out != want {
					t.Fatalf("chatml: got %q, want %q", out, want)
				}
			}
			if name == "llama3" && !strings.Contains(out, strings.TrimSpace(content2)) {
				t.Fatalf("llama3: content %q missing from %q", content2, out)
			}
		}
	})
}

// FuzzChatTemplate compiles and renders arbitrary template sources: errors are fine,
// panics and runaway renders are not.
func FuzzChatTemplate(f *testing.F) {
	for _, s := range []string{
		ChatML,
		`{% for m in messages[::-1] %}{{ loop.index }}{{ m.content.split(' ')[-1] }}{% endfor %}`,
		`{% set ns = namespace(a=1) %}{% set ns.a = ns.a * 2 %}{{ ns.a ** 3 }}`,
		`{% macro f(x) %}{{ x ~ f(x) }}{% endmacro %}{{ f('a') }}`,
		`{{ messages | tojson(indent=2) }}{{ strftime_now('%d %b %Y') }}`,
		`{{ 'abc'[5:-1] }}{{ messages[-5] }}{% if x is string %}{% endif %}`,
	} {
		f.Add(s, "hi")
	}
	f.Fuzz(func(t *testing.T, src, content string) {
		tpl, err := New(src, Options{Now: testNow, MaxSteps: 2000, MaxOutput: 1 << 16})
		if err != nil {
			if !errors.Is(err, ErrTemplate) {
				t.Fatalf("New: error outside ErrTemplate: %v", err)
			}
			return
		}
		out, err := tpl.Render([]Message{{Role: "user", Content: content}}, true)
		if err == nil && len(out) > 1<<16 {
			t.Fatalf("output of %d bytes beyond the limit", len(out))
		}
	})
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
