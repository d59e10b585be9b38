package worker

import (
	"testing"
	"time"
)

// TestPolicyOnCrash: the backoff doubles with each crash in the window up to its cap,
// crashes older than the window are forgotten, and the MaxCrashes-th crash within the
// window opens the circuit.
func TestPolicyOnCrash(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := Policy{MinBackoff: 100 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, MaxCrashes: 5, Window: time.Minute}
	steps := []struct {
		at    time.Duration
		delay time.Duration
		open  bool
		kept  int
	}{
		{0, 100 * time.Millisecond, false, 1},
		{time.Second, 200 * time.Millisecond, false, 2},
		{2 * time.Second, 400 * time.Millisecond, false, 3},
		{3 * time.Second, 500 * time.Millisecond, false, 4},  // capped
		{90 * time.Second, 100 * time.Millisecond, false, 1}, // the window forgot the four
		{91 * time.Second, 200 * time.Millisecond, false, 2},
		{92 * time.Second, 400 * time.Millisecond, false, 3},
		{93 * time.Second, 500 * time.Millisecond, false, 4},
		{94 * time.Second, 0, true, 5},
	}
	var h []time.Time
	for i, s := range steps {
		var d time.Duration
		var open bool
		h, d, open = p.OnCrash(h, t0.Add(s.at))
		if d != s.delay || open != s.open || len(h) != s.kept {
			t.Errorf("step %d (crash at %v): delay %v open %v kept %d, want %v %v %d", i, s.at, d, open, len(h), s.delay, s.open, s.kept)
		}
	}
	// The zero Policy takes the defaults.
	_, d, open := Policy{}.OnCrash(nil, t0)
	if d != DefaultMinBackoff || open {
		t.Errorf("zero policy: %v %v", d, open)
	}
}
