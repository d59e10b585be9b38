package batch

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/money"
)

type checkFunc func(tenant, endpoint string, body []byte) (money.Money, error)

func (f checkFunc) Check(tenant, endpoint string, body []byte) (money.Money, error) {
	return f(tenant, endpoint, body)
}

// forbidBig refuses the model "big" and prices every other line at 7.
var forbidBig = checkFunc(func(_, _ string, body []byte) (money.Money, error) {
	if strings.Contains(string(body), `"big"`) {
		return 0, errors.New(`the model "big" is not in your plan`)
	}
	return 7, nil
})

func TestValidateNamesEachBadLine(t *testing.T) {
	ok := func(id string) string {
		return `{"custom_id":"` + id + `","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}`
	}
	in := strings.Join([]string{
		ok("a"),
		`{"custom_id":"b", not json`,
		ok("a"),
		`{"custom_id":"c","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"x"}}`,
		`{"custom_id":"d","method":"POST","url":"/v1/chat/completions","body":{"model":"big","messages":[]}}`,
		`{"method":"POST","url":"/v1/chat/completions","body":{}}`,
		ok("e"),
	}, "\n")
	lines, errs := Validate(strings.NewReader(in), "t", "/v1/chat/completions", forbidBig)
	if lines != nil {
		t.Fatalf("lines = %v, want none for a bad file", lines)
	}
	var got []string
	for _, e := range errs {
		got = append(got, fmt.Sprintf("%d:%s", e.Line, e.Code))
	}
	want := "2:invalid_json_line 3:duplicate_custom_id 4:mismatched_endpoint 5:invalid_request 6:missing_required_parameter"
	if strings.Join(got, " ") != want {
		t.Fatalf("errors = %v\nwant     %s", got, want)
	}
}

func TestValidateGoodFilePricesEachLine(t *testing.T) {
	var b strings.Builder
	for i := range 5 {
		fmt.Fprintf(&b, `{"custom_id":"r%d","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"x"}}`+"\n", i)
	}
	lines, errs := Validate(strings.NewReader(b.String()), "t", "/v1/completions", forbidBig)
	if errs != nil || len(lines) != 5 {
		t.Fatalf("lines %d errs %v", len(lines), errs)
	}
	for i, l := range lines {
		if l.Index != i || l.CustomID != fmt.Sprintf("r%d", i) || l.Worst != 7 {
			t.Fatalf("line %d = %+v", i, l)
		}
	}
}

func TestRunOrderGroupsSharedSystemPrompts(t *testing.T) {
	body := func(sys string) string {
		if sys == "" {
			return `{"model":"m","messages":[{"role":"user","content":"q"}]}`
		}
		return `{"model":"m","messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"q"}]}`
	}
	var b strings.Builder
	for i, sys := range []string{"A", "B", "", "A", "B", "A", ""} {
		fmt.Fprintf(&b, `{"custom_id":"%d","method":"POST","url":"/v1/chat/completions","body":%s}`+"\n", i, body(sys))
	}
	lines, errs := Validate(strings.NewReader(b.String()), "t", "/v1/chat/completions", nil)
	if errs != nil {
		t.Fatal(errs)
	}
	var got []string
	for _, l := range RunOrder(lines) {
		got = append(got, l.CustomID)
	}
	if strings.Join(got, " ") != "0 3 5 1 4 2 6" {
		t.Fatalf("run order %v", got)
	}
}

// TestRunOrderGroupsMessagesAndResponsesBySystem: a Messages line's system and a
// Responses line's instructions group lines as a chat line's system message does,
// so the prefix cache serves the shared prompt while it is warm.
func TestRunOrderGroupsMessagesAndResponsesBySystem(t *testing.T) {
	for _, c := range []struct{ endpoint, field string }{{"/v1/messages", "system"}, {"/v1/responses", "instructions"}} {
		var b strings.Builder
		for i, sys := range []string{"A", "B", "", "A", "B", "A", ""} {
			body := `{"model":"m","input":"q"}`
			if sys != "" {
				body = `{"model":"m","` + c.field + `":"` + sys + `","input":"q"}`
			}
			fmt.Fprintf(&b, `{"custom_id":"%d","method":"POST","url":%q,"body":%s}`+"\n", i, c.endpoint, body)
		}
		lines, errs := Validate(strings.NewReader(b.String()), "t", c.endpoint, nil)
		if errs != nil {
			t.Fatal(errs)
		}
		var got []string
		for _, l := range RunOrder(lines) {
			got = append(got, l.CustomID)
		}
		if strings.Join(got, " ") != "0 3 5 1 4 2 6" {
			t.Errorf("%s: run order %v", c.endpoint, got)
		}
	}
}
