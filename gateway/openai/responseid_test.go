package openai

import (
	"strings"
	"testing"

	"github.com/lmlite/lmlite/gateway/core"
)

// TestResponseIDsFollowStartOrder: the ids of responses started one after the other
// sort in that order whatever their request ids' random digits (a store keeps them
// in key order: respstore's appendFill), each still ends with its request id's
// digits (unique), and the Response object says the id the response is stored under.
func TestResponseIDsFollowStartOrder(t *testing.T) {
	const ms = 1795000000000 // 2026-11
	reqs := []string{"req_ffffffffffffffff", "req_0000000000000000", "req_8000000000000000", "req_0000000000000001"}
	var last string
	for i, r := range reqs {
		m := &core.Meta{ReqID: r, Model: "tiny", Created: ms / 1000, StartMilli: ms + int64(i)}
		id := ResponseID(m)
		if !strings.HasPrefix(id, "resp_") || !strings.HasSuffix(id, strings.TrimPrefix(r, "req_")) || len(id) != 5+11+16 {
			t.Fatalf("%s: response id %q", r, id)
		}
		if i > 0 && id <= last {
			t.Errorf("%s started after %s, its response id %s sorts before it: %s", r, reqs[i-1], id, last)
		}
		last = id
		var st idStorer
		o := NewResponseOutput(m, ResponseOptions{Store: &st})
		body := o.AppendWhole(nil, &core.Whole{Choices: []core.Choice{{Content: "hi", Finish: "stop"}}})
		if st.id != id || !strings.Contains(string(body), `{"id":"`+id+`"`) {
			t.Errorf("stored as %q, answered %s; want the id %s", st.id, body, id)
		}
	}
}

type idStorer struct{ id string }

func (s *idStorer) StoreResponse(id string, _ []Item, _ []byte) error { s.id = id; return nil }
