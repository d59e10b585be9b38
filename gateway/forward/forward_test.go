package forward

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestDropComments: the relay drops events made only of comment lines.
func TestDropComments(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"data: 1\n\n", "data: 1\n\n"},
		{": keep-alive\n\n", ""},
		{": keep-alive\n\ndata: 1\n\n: keep-alive\n\ndata: [DONE]\n\n", "data: 1\n\ndata: [DONE]\n\n"},
		{": c\ndata: 1\n\n", ": c\ndata: 1\n\n"}, // a comment within an event with data stays
		{"data: 1\n\n: a\n: b\n\n", "data: 1\n\n"},
	} {
		if got := string(dropComments([]byte(c.in))); got != c.want {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
	}
}

// TestSuspicionSkip: a node that failed a forward is passed over until it announces
// itself again, and one that did not answer in time for its hold as well.
func TestSuspicionSkip(t *testing.T) {
	t0 := time.Unix(1000, 0)
	failed := t0.Add(3 * time.Second) // its announcement's expiry when it failed
	for _, c := range []struct {
		name      string
		sp        suspicion
		announced time.Time
		now       time.Time
		skip      bool
	}{
		{"unreached, not announced since", suspicion{expires: failed}, failed, t0.Add(time.Second), true},
		{"unreached, announced again", suspicion{expires: failed}, failed.Add(time.Second), t0.Add(time.Second), false},
		{"unresponsive, announced again, in its hold", suspicion{expires: failed, until: t0.Add(30 * time.Second)}, failed.Add(time.Second), t0.Add(29 * time.Second), true},
		{"unresponsive, hold over, announced again", suspicion{expires: failed, until: t0.Add(30 * time.Second)}, failed.Add(30 * time.Second), t0.Add(30 * time.Second), false},
		{"unresponsive, hold over, not announced since", suspicion{expires: failed, until: t0.Add(30 * time.Second)}, failed, t0.Add(31 * time.Second), true},
	} {
		if got := c.sp.skip(c.announced, c.now); got != c.skip {
			t.Errorf("%s: skip %v, want %v", c.name, got, c.skip)
		}
	}
}

// TestClassifyForwardErrors: what a forward's error means for the request.
func TestClassifyForwardErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want Kind
	}{
		{errors.New("dial tcp: connection refused"), Unreached},
		{ErrDraining, Draining},
		{fmt.Errorf("%w: read: connection reset", ErrLost), Lost},
		{fmt.Errorf("%w (300ms): i/o timeout", ErrUnresponsive), Unresponsive},
	} {
		if got := Classify(c.err); got != c.want {
			t.Errorf("%v: %v, want %v", c.err, got, c.want)
		}
	}
}

// TestStreamEnds: a relayed stream is complete when its last whole event ends a
// stream in one of the APIs served (so a complete Messages or Responses stream does
// not get an error appended), and not when an event merely mentions an end.
func TestStreamEnds(t *testing.T) {
	for _, c := range []struct {
		evs  string
		want bool
	}{
		{"data: {}\n\ndata: [DONE]\n\n", true},
		{"data: [DONE]\n\ndata: {}\n\n", false},
		{"event: message_delta\ndata: {}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", true},
		{"event: response.completed\ndata: {}\n\n", true},
		{"event: response.incomplete\ndata: {}\n\n", true},
		{"event: response.failed\ndata: {}\n\n", true},
		{"event: error\ndata: {}\n\n", true},
		{"event: content_block_delta\ndata: {\"text\":\"event: message_stop\\n\"}\n\n", false},
		{"event: response.output_text.delta\ndata: {}\n\n", false},
	} {
		if got := ends([]byte(c.evs)); got != c.want {
			t.Errorf("%q: %v, want %v", c.evs, got, c.want)
		}
	}
}
