package respstore_test

import (
	"testing"

	"github.com/lmlite/lmlite/respstore"
)

// TestLimitsFull: a tenant is full when one more response of any size would pass a
// limit (its count at the limit, or its bytes at or past theirs); 0 is no limit.
func TestLimitsFull(t *testing.T) {
	for _, c := range []struct {
		lim  respstore.Limits
		u    respstore.Usage
		want string // the LimitError's Limit; "": room
	}{
		{respstore.Limits{}, respstore.Usage{Count: 1 << 40, Bytes: 1 << 50}, ""},
		{respstore.Limits{MaxCount: 3}, respstore.Usage{Count: 2, Bytes: 1 << 50}, ""},
		{respstore.Limits{MaxCount: 3}, respstore.Usage{Count: 3}, "responses_max_count"},
		{respstore.Limits{MaxCount: 3}, respstore.Usage{Count: 4}, "responses_max_count"}, // a limit lowered under the usage
		{respstore.Limits{MaxBytes: 100}, respstore.Usage{Count: 9, Bytes: 99}, ""},
		{respstore.Limits{MaxBytes: 100}, respstore.Usage{Count: 9, Bytes: 100}, "responses_max_bytes"},
		{respstore.Limits{MaxCount: 3, MaxBytes: 100}, respstore.Usage{Count: 3, Bytes: 100}, "responses_max_count"},
		{respstore.Limits{MaxCount: 3, MaxBytes: 100}, respstore.Usage{Count: 1, Bytes: 101}, "responses_max_bytes"},
	} {
		le := c.lim.Full(c.u)
		got := ""
		if le != nil {
			got = le.Limit
			if want := map[string]int64{"responses_max_count": c.lim.MaxCount, "responses_max_bytes": c.lim.MaxBytes}[got]; le.Max != want {
				t.Errorf("%+v %+v: Max %d, want %d", c.lim, c.u, le.Max, want)
			}
		}
		if got != c.want {
			t.Errorf("limits %+v, usage %+v: %q, want %q", c.lim, c.u, got, c.want)
		}
	}
}
