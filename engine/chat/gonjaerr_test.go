package chat

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// TestGonjaDropsTheErrorChain pins what sentinelIn works around: the error gonja's
// Execute returns for a function's error (raise_exception, range past MaxRange)
// keeps our sentinel's text but not the sentinel itself. If gonja starts wrapping
// with %w, the first check fails: match with errors.Is alone in sentinelIn. If
// gonja stops keeping the text, the second fails: sentinelIn no longer finds it.
func TestGonjaDropsTheErrorChain(t *testing.T) {
	for _, c := range []struct {
		src  string
		want error
	}{
		{`{{ raise_exception("no system role") }}`, ErrException},
		{`{% for i in range(1000000000) %}x{% endfor %}`, ErrTooLong},
	} {
		tpl, err := New(c.src, Options{})
		if err != nil {
			t.Fatal(err)
		}
		raw := tpl.tpl.Execute(io.Discard, exec.NewContext(map[string]any{budgetKey: &budget{maxSteps: 1 << 20}}))
		if raw == nil {
			t.Fatalf("%s: rendered", c.src)
		}
		if errors.Is(raw, c.want) {
			t.Errorf("%s: gonja now keeps the error chain (%v): sentinelIn can use errors.Is alone", c.src, raw)
		}
		if !strings.Contains(raw.Error(), c.want.Error()) {
			t.Errorf("%s: gonja's error %q no longer holds %q: sentinelIn cannot find it", c.src, raw, c.want)
		}
		if got := sentinelIn(raw); got != c.want {
			t.Errorf("%s: sentinelIn = %v, want %v", c.src, got, c.want)
		}
	}
}
