package chat

import (
	"errors"
	"io"
	"testing"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// TestGonjaDropsTheErrorChain pins what raise works around: an error that a function
// returns as its value reaches Execute's error without its kind. If gonja starts
// keeping the chain, the check fails: the limits and the exception can be returned
// as values again, without fault.
func TestGonjaDropsTheErrorChain(t *testing.T) {
	tpl, err := New(`{{ failing() }}`, Options{})
	if err != nil {
		t.Fatal(err)
	}
	failing := func(*exec.Evaluator, *exec.VarArgs) *exec.Value { return exec.AsValue(ErrException) }
	raw := tpl.tpl.Execute(io.Discard, exec.NewContext(map[string]any{
		budgetKey: &budget{maxSteps: 1 << 20},
		"failing": failing,
	}))
	if raw == nil {
		t.Fatal("rendered")
	}
	if errors.Is(raw, ErrException) {
		t.Errorf("gonja now keeps the error chain (%v): return the errors as values, without raise's panic", raw)
	}
}

// TestRaiseKeepsTheKind: the template's exception and the limits a call breaks come
// out of Render as themselves, with their own message (the part a client sees
// after the kind), not gonja's text around it.
func TestRaiseKeepsTheKind(t *testing.T) {
	for _, c := range []struct {
		src  string
		want error
		msg  string
	}{
		{`{{ raise_exception("no system role") }}`, ErrException, "chat: template raised an exception: no system role"},
		{`{% for i in range(1000000000) %}x{% endfor %}`, ErrTooLong, "chat: template ran too long: range of 1000000000 items, more than 100000"},
		{`{{ 'x'.center(10000000000) }}`, ErrTooLarge, "chat: output too large: center beyond 4194304 bytes"},
	} {
		tpl, err := New(c.src, Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = tpl.Render([]Message{{Role: "user", Content: "hi"}}, true)
		if !errors.Is(err, c.want) || err.Error() != c.msg {
			t.Errorf("%s: %v, want %v with the message %q", c.src, err, c.want, c.msg)
		}
	}
}
