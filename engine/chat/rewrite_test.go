package chat

import "testing"

// TestRewriteReachesEveryStatement puts a one-item negative index (which gonja
// alone gets wrong) in each place an expression can stand; the expected text is
// jinja2's.
func TestRewriteReachesEveryStatement(t *testing.T) {
	tests := []struct{ src, want string }{
		{"{% with a = [5][-1] %}{{ a }}{% endwith %}", "5"},
		{"{% filter upper %}{{ ['x'][-1] }}{% endfilter %}", "X"},
		{"{% set a = [5][-1] %}{{ a }}", "5"},
		{"{% if [5][-1] == 5 %}y{% endif %}", "y"},
		{"{% for x in [[5]][-1] %}{{ x }}{% endfor %}", "5"},
		{"{% set b %}{{ [5][-1] }}{% endset %}{{ b }}", "5"},
		{"{% for x in [1, 2] if [x][-1] > 1 %}{{ x }}{% endfor %}", "2"},
		{"{% macro g(a=[6][-1]) %}{{ a }}{% endmacro %}{{ g() }}", "6"},
		{"{{ 'abc' | replace('a', ['z'][-1]) }}", "zbc"},
		{"{{ 5 is divisibleby([5][-1]) }}", "True"},
		{"{{ {'k': [5][-1]}['k'] }}", "5"},
		{"{{ [[5][-1]] }}", "[5]"},
		{"{{ [5][-1] if true else 0 }}", "5"},
		{"{% set ns = namespace(a=0) %}{% set ns.a = [5][-1] %}{{ ns.a }}", "5"},
		{"{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}{{ [5][-1] }}{% endcall %}", "5"},
		{"{{ ([1, 2] + [3])[-3] }}{{ 3 * 2 }}{{ 'a' ~ [1][-1] }}", "16a1"},
	}
	for _, tc := range tests {
		tpl, err := New(tc.src, Options{})
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		got, err := tpl.Render(nil, false)
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.src, got, err, tc.want)
		}
	}
}

// TestToJSON: Python's json.dumps as transformers calls it (expected text from
// Python 3.11).
func TestToJSON(t *testing.T) {
	tests := []struct{ src, want string }{
		{`{{ {'a': [1, 2]} | tojson(indent=1, separators=(',', ':')) }}`, "{\n \"a\":[\n  1,\n  2\n ]\n}"},
		{`{{ {'a': [1, '\x7f']} | tojson }}`, "{\"a\": [1, \"\x7f\"]}"},
		{`{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}`, `{"a": 2, "b": 1}`},
		{`{{ 'é👋' | tojson(ensure_ascii=true) }}`, `"\u00e9\ud83d\udc4b"`},
		{`{{ [] | tojson }}{{ {} | tojson }}{{ none | tojson }}{{ 1.5 | tojson }}{{ 10 | tojson }}`, `[]{}null1.510`},
	}
	for _, tc := range tests {
		tpl, err := New(tc.src, Options{})
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		got, err := tpl.Render(nil, false)
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.src, got, err, tc.want)
		}
	}
}
