package worker

import (
	"strings"
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

// TestTimingNext: the supervisor's decision at explicit times: hangs, idle exits
// (with requests' keep_alive and groups of models), restarts; and when it is next
// due, exactly the first instant at which time alone changes it.
func TestTimingNext(t *testing.T) {
	t0 := time.Unix(5000, 0)
	tm := timing{HangAfter: 700 * time.Millisecond, KillAfter: 5 * time.Second, StartTimeout: 30 * time.Second}
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	one := func(lastUsed int, timeout, keep time.Duration) []idler {
		return []idler{{LastUsed: ms(lastUsed), Timeout: timeout, KeepAlive: keep}}
	}
	none := time.Time{}
	cases := []struct {
		name string
		v    view
		now  time.Time
		want action
		due  time.Time // next's at: when it looks again without an event
	}{
		{"running, beating", view{State: gRunning, LastBeat: ms(0), Models: one(0, time.Second, 0), Inflight: 1}, ms(700), actNone, ms(700).Add(1)},
		// Late by HangAfter: not ready at once, killed only after KillAfter (a
		// starved machine delays a healthy worker's beats, or their reading).
		{"running, beat 701 ms ago", view{State: gRunning, LastBeat: ms(0), Models: one(0, time.Second, 0), Inflight: 1}, ms(701), actLate, none},
		{"late, no beat since", view{State: gRunning, LastBeat: ms(0), Models: one(0, time.Second, 0), Inflight: 1, Late: true}, ms(1500), actNone, ms(5000).Add(1)},
		{"late, beat again", view{State: gRunning, LastBeat: ms(1400), Models: one(0, time.Second, 0), Inflight: 1, Late: true}, ms(1500), actBack, none},
		{"late for 5 s", view{State: gRunning, LastBeat: ms(0), Models: one(0, time.Second, 0), Inflight: 1, Late: true}, ms(5001), actKillHung, none},
		{"late beats idle", view{State: gRunning, LastBeat: ms(0), Models: one(0, time.Millisecond, 0)}, ms(800), actLate, none},
		{"late and idle: no stop", view{State: gRunning, LastBeat: ms(0), Models: one(0, time.Millisecond, 0), Late: true}, ms(800), actNone, ms(5000).Add(1)},
		{"hung beats idle", view{State: gRunning, LastBeat: ms(0), Models: one(0, time.Millisecond, 0), Late: true}, ms(5001), actKillHung, none},
		{"idle", view{State: gRunning, LastBeat: ms(900), Models: one(0, time.Second, 0)}, ms(1000), actStopIdle, none},
		{"idle but busy", view{State: gRunning, LastBeat: ms(900), Models: one(0, time.Second, 0), Inflight: 1}, ms(1000), actNone, ms(1600).Add(1)},
		{"never idle", view{State: gRunning, LastBeat: ms(900), Models: one(0, -1, 0)}, ms(1000), actNone, ms(1600).Add(1)},
		// A request's keep_alive replaces its model's timeout, shorter or longer.
		{"keep_alive shortens", view{State: gRunning, LastBeat: ms(900), Models: one(0, time.Minute, 300*time.Millisecond)}, ms(300), actStopIdle, none},
		{"keep_alive shortens, not yet", view{State: gRunning, LastBeat: ms(200), Models: one(0, time.Minute, 300*time.Millisecond)}, ms(299), actNone, ms(300)},
		{"keep_alive lengthens", view{State: gRunning, LastBeat: ms(900), Models: one(0, time.Second, time.Hour)}, ms(1000), actNone, ms(1600).Add(1)},
		{"keep_alive with a timeout of never", view{State: gRunning, LastBeat: ms(900), Models: one(0, -1, time.Second)}, ms(1000), actStopIdle, none},
		// A group's worker exits once each of its models has been idle for its own timeout.
		{"group, one model still warm", view{State: gRunning, LastBeat: ms(900), Models: []idler{{ms(0), time.Second, 0}, {ms(500), time.Second, 0}}}, ms(1000), actNone, ms(1500)},
		{"group, both idle", view{State: gRunning, LastBeat: ms(1400), Models: []idler{{ms(0), time.Second, 0}, {ms(500), time.Second, 0}}}, ms(1500), actStopIdle, none},
		{"group, one never idles", view{State: gRunning, LastBeat: ms(9900), Models: []idler{{ms(0), time.Second, 0}, {ms(0), -1, 0}}}, ms(10_000), actNone, ms(10_600).Add(1)},
		{"starting, in time", view{State: gStarting, Started: ms(0), LastBeat: ms(0)}, ms(29_000), actNone, ms(30_000).Add(1)},
		{"starting, no hello", view{State: gStarting, Started: ms(0), LastBeat: ms(0)}, ms(30_001), actKillHung, none},
		{"stopping, 4 s", view{State: gStopping, StopAt: ms(1000), Models: one(0, time.Second, 0)}, ms(5_999), actNone, ms(6_000)},
		{"stopping, stuck", view{State: gStopping, StopAt: ms(1000), Models: one(0, time.Second, 0)}, ms(6_000), actKillStopping, none},
		{"backoff, early", view{State: gBackoff, RestartAt: ms(100)}, ms(99), actNone, ms(100)},
		{"backoff, over", view{State: gBackoff, RestartAt: ms(100)}, ms(100), actRestart, none},
		{"backoff, closing", view{State: gBackoff, RestartAt: ms(100), Closed: true}, ms(200), actNone, none},
		{"failed", view{State: gFailed}, ms(1e6), actNone, none},
		{"down", view{State: gDown, LastBeat: ms(0)}, ms(1e6), actNone, none},
	}
	for _, c := range cases {
		got, why, at := tm.next(c.v, c.now)
		if got != c.want || (got == actKillHung) != strings.HasPrefix(why, "hung") {
			t.Errorf("%s: %v %q, want %v", c.name, got, why, c.want)
		}
		if !at.Equal(c.due) {
			t.Errorf("%s: due at %v, want %v", c.name, at.Sub(t0), c.due.Sub(t0))
		}
		// The janitor sleeps until at: nothing may be due before it, and something
		// must be at it (or it wakes for nothing).
		if !at.IsZero() {
			if act, _, _ := tm.next(c.v, at.Add(-1)); act != actNone {
				t.Errorf("%s: %v due before at", c.name, act)
			}
			if act, _, _ := tm.next(c.v, at); act == actNone {
				t.Errorf("%s: nothing due at at", c.name)
			}
		}
	}
}
