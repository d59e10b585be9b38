package chat

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestHostile renders templates that try to hang, exhaust memory or crash the
// server; each must end quickly with the expected error (nil: the attempt is
// harmless and renders).
func TestHostile(t *testing.T) {
	tests := []struct {
		name, src string
		want      error
	}{
		{"raise_exception", `{{ raise_exception("no system role") }}`, ErrException},
		{"huge range", `{% for i in range(1000000000) %}x{% endfor %}`, ErrTooLong},
		{"nested loops", `{% for a in range(30000) %}{% for b in range(30000) %}{% endfor %}{% endfor %}`, ErrTooLong},
		{"nested filtered loops", `{% for a in range(30000) %}{% for b in range(30000) if false %}{% endfor %}{% endfor %}`, ErrTooLong},
		{"output flood", `{% set s = 'x' * 1000000 %}{% for a in range(100000) %}{{ s }}{% endfor %}`, ErrTooLarge},
		{"recursive macro", `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, ErrTooLong},
		{"mutually recursive macros", `{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}`, ErrTooLong},
		{"recursion through call blocks", `{% macro m() %}{% call m() %}x{% endcall %}{{ caller() }}{% endmacro %}{{ m() }}`, ErrTooLong},
		{"binary recursion", `{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}`, ErrTooLong},
		{"repetition inside a macro", `{% macro f() %}{{ 'x' * 1000000000000 }}{% endmacro %}{{ f() }}`, ErrTooLarge},
		{"string repetition", `{{ 'x' * 1000000000000 }}`, ErrTooLarge},
		{"reversed repetition", `{{ 1000000000000 * 'xy' }}`, ErrTooLarge},
		{"list repetition", `{{ [1, 2] * 1000000000 }}`, ErrTooLarge},
		{"list of big strings", `{% set s = 'x' * 1000000 %}{{ [s] * 1000 }}`, ErrTooLarge},
		{"doubling concat", `{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}`, ErrTooLarge},
		{"doubling plus", `{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}`, ErrTooLarge},
		{"center", `{{ 'x' | center(10000000000) }}`, ErrTooLarge},
		{"center method", `{{ 'x'.center(10000000000) }}`, ErrTooLarge},
		{"ljust method", `{{ 'x'.ljust(10000000000) }}`, ErrTooLarge},
		{"zfill method", `{{ '1'.zfill(10000000000) }}`, ErrTooLarge},
		{"indent", `{{ ('a\n' * 100000) | indent(1000) }}`, ErrTooLarge},
		{"replace amplification", `{% set s = 'a' * 100000 %}{{ s | replace('a', s) }}`, ErrTooLarge},
		{"replace method", `{% set s = 'a' * 100000 %}{{ s.replace('a', s) }}`, ErrTooLarge},
		{"join", `{% set s = 'a' * 1000000 %}{{ [s, s, s, s, s] | join(',') }}`, ErrTooLarge},
		{"format width", `{{ '%999999999999d' | format(1) }}`, ErrTooLarge},
		{"batch fill", `{{ [1] | batch(1000000000, 0) | list }}`, ErrTooLarge},
		{"namespace in itself", `{% set ns = namespace(x=1) %}{% set ns.me = ns %}{{ ns }}`, ErrRender},
		{"namespace in itself via a list", `{% set ns = namespace(x=1) %}{% set ns.me = [1, {'a': ns}] %}{{ ns == ns }}`, ErrRender},
		{"namespace in itself if-else", `{% set ns = namespace(x=1) %}{% set ns.me = 1 if false else ns %}{{ ns }}`, ErrRender},
		{"dict in itself by item", `{% set d = dict(a=1) %}{% set d['me'] = d %}{{ d }}`, ErrRender},
		{"update with itself", `{% set ns = namespace(x=1) %}{% do ns.update({'me': ns}) %}{{ ns }}`, nil},
		{"update kwargs with itself", `{% set ns = namespace(x=1) %}{% do ns.update(me=ns) %}{{ ns }}`, nil},
		{"setdefault with itself", `{% set ns = namespace(x=1) %}{% do ns.setdefault('me', ns) %}{{ ns }}`, nil},
		{"deep chain", `{% set ns = namespace(c=none) %}{% for i in range(1000) %}{% set ns.c = namespace(c=ns.c) %}{% endfor %}{{ ns }}`, ErrTooLarge},
		{"undefined call", `{{ nothing() }}`, ErrRender},
		{"strftime_now arguments", `{{ strftime_now() }}`, ErrRender},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Fewer steps than the default keep the test short under -race.
			tpl, err := New(tc.src, Options{Now: testNow, MaxSteps: 20_000})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			type result struct {
				out string
				err error
			}
			done := make(chan result, 1)
			go func() {
				out, err := tpl.Render([]Message{{Role: "user", Content: "hi"}}, true)
				done <- result{out, err}
			}()
			select {
			case r := <-done:
				if tc.want == nil && r.err != nil || !errors.Is(r.err, tc.want) {
					t.Errorf("err %v (output %d bytes), want %v", r.err, len(r.out), tc.want)
				}
			case <-time.After(2 * time.Minute):
				// A hang guard only: the step budget stops the render (0.7 s
				// for binary recursion alone, 20 s seen under -race at load 30).
				t.Fatal("render did not stop")
			}
		})
	}
}

// TestHostileParse: templates that must be refused (or parsed) without crashing.
func TestHostileParse(t *testing.T) {
	tests := []struct {
		name, src string
	}{
		{"deep brackets", "{{ " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000) + " }}"},
		{"deep ifs", strings.Repeat("{% if true %}", 50000) + strings.Repeat("{% endif %}", 50000)},
		{"deep lists", "{{ " + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + " }}"},
		{"too large", strings.Repeat("x", MaxTemplateSize+1)},
		{"include", `{% include "/etc/passwd" %}`},
		{"extends", `{% extends "/etc/passwd" %}`},
		{"import", `{% import "/etc/passwd" as x %}`},
		{"unclosed", `{% for x in messages %}`},
		{"recursive loop", `{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}`},
		{"bad syntax", `{{ + }}`},
		{"lexer loop on a lone !", "{%!0.\ud2c2\x1d0\xffL"},
		{"lexer panic on a number", "{{ 0.\ud2c2 }}"},
		{"control byte", "{{ a\x01 }}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.src, Options{})
			if !errors.Is(err, ErrTemplate) {
				t.Errorf("New: %v, want ErrTemplate", err)
			}
		})
	}
}

func TestLimitsOptions(t *testing.T) {
	tpl, err := New(`{% for m in messages %}{{ m.content }}{% endfor %}`, Options{MaxOutput: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tpl.Render([]Message{{Role: "user", Content: "12345"}, {Role: "user", Content: "67890"}}, false); err != nil {
		t.Errorf("10 bytes: %v", err)
	}
	if _, err := tpl.Render([]Message{{Role: "user", Content: "12345"}, {Role: "user", Content: "678901"}}, false); !errors.Is(err, ErrTooLarge) {
		t.Errorf("11 bytes: %v, want ErrTooLarge", err)
	}
	tpl, err = New(`{% for i in range(100) %}{% endfor %}`, Options{MaxSteps: 50})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tpl.Render(nil, false); !errors.Is(err, ErrTooLong) {
		t.Errorf("100 iterations with 50 steps: %v, want ErrTooLong", err)
	}
}
