package worker

import (
	"fmt"
	"time"
)

// Defaults of Policy and of the Pool's timing.
const (
	DefaultBeat       = 200 * time.Millisecond // a worker's heartbeat interval (at most 250 ms by the issue; each beat wakes both processes)
	DefaultHangAfter  = 700 * time.Millisecond // no heartbeat for this long: late (its models not ready until it beats again)
	DefaultKillAfter  = 5 * time.Second        // no heartbeat for this long (25 beats missed): hung (killed and restarted)
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 10 * time.Second
	DefaultMaxCrashes = 5
	DefaultWindow     = 2 * time.Minute
)

// Policy decides what happens after a worker crashes: restart after an exponential
// backoff, or, after MaxCrashes crashes within Window, open the circuit (the group's
// models are failed until GC or an admin load resets them). Zero fields take the
// defaults above.
type Policy struct {
	MinBackoff time.Duration // the delay after a first crash; doubled for each crash in the window
	MaxBackoff time.Duration // the delay's cap
	MaxCrashes int           // crashes within Window that open the circuit
	Window     time.Duration
}

func (p Policy) withDefaults() Policy {
	if p.MinBackoff <= 0 {
		p.MinBackoff = DefaultMinBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = DefaultMaxBackoff
	}
	if p.MaxCrashes <= 0 {
		p.MaxCrashes = DefaultMaxCrashes
	}
	if p.Window <= 0 {
		p.Window = DefaultWindow
	}
	return p
}

// OnCrash is the decision after a crash at now. crashes are the earlier crashes'
// times (oldest first); it returns them with now added and those older than Window
// dropped, and either the delay before the restart or open: no restart.
func (p Policy) OnCrash(crashes []time.Time, now time.Time) (kept []time.Time, delay time.Duration, open bool) {
	p = p.withDefaults()
	for _, c := range crashes {
		if now.Sub(c) < p.Window {
			kept = append(kept, c)
		}
	}
	kept = append(kept, now)
	if len(kept) >= p.MaxCrashes {
		return kept, 0, true
	}
	delay = p.MinBackoff
	for i := 1; i < len(kept) && delay < p.MaxBackoff; i++ {
		delay *= 2
	}
	return kept, min(delay, p.MaxBackoff), false
}

// stopGrace is how long a worker asked to exit (idle) has before it is killed.
const stopGrace = 5 * time.Second

// timing holds the supervisor's time limits.
type timing struct {
	HangAfter    time.Duration // a running worker without a heartbeat for this long is late: not ready
	KillAfter    time.Duration // and for this long (≥ HangAfter) hung: killed
	StartTimeout time.Duration // a starting worker without a hello for this long is hung
}

// view is what the supervisor's periodic decision looks at: a group's state and
// times, copied out under its lock.
type view struct {
	State     gstate
	Started   time.Time // the process's spawn (starting, running, stopping)
	LastBeat  time.Time // its last heartbeat (or hello, or spawn)
	Inflight  int       // the group's requests in flight
	Models    []idler   // the group's models
	StopAt    time.Time // in stopping: when the worker was asked to exit
	RestartAt time.Time // in backoff
	Closed    bool      // the Pool is closing
	Late      bool      // running, and found late (actLate) with no heartbeat since
}

// idler is one model of a group as the idle decision sees it.
type idler struct {
	LastUsed  time.Time     // the end of its last request (or its worker's start)
	Timeout   time.Duration // its idle_timeout (the default filled in); <= 0: never
	KeepAlive time.Duration // > 0: its last request's keep_alive, which replaces Timeout
}

// timeout is how long the model may stay idle (<= 0: forever): the last request's
// KeepAlive when it has one, else Timeout, as in process (engine's lifecycle). The
// caller bounds a request's KeepAlive (the gateway).
func (m idler) timeout() time.Duration {
	if m.KeepAlive > 0 {
		return m.KeepAlive
	}
	return m.Timeout
}

// idleAt is when every model of the group will have been idle for its timeout, so
// that the worker may exit (scale to zero); ok is false while a request is in flight
// or when a model never times out (it keeps its group's worker).
func (v view) idleAt() (at time.Time, ok bool) {
	if v.Inflight > 0 || len(v.Models) == 0 {
		return time.Time{}, false
	}
	for _, m := range v.Models {
		t := m.timeout()
		if t <= 0 {
			return time.Time{}, false
		}
		if end := m.LastUsed.Add(t); end.After(at) {
			at = end
		}
	}
	return at, true
}

// action is the supervisor's periodic decision.
type action int

const (
	actNone         action = iota
	actKillHung            // no heartbeat (or hello) in time: kill it; its models are down at once
	actStopIdle            // every model idle for its timeout: ask it to exit (scale to zero)
	actKillStopping        // asked to exit stopGrace ago and still there
	actRestart             // the backoff is over
	actLate                // no heartbeat for HangAfter: its models are not ready, new requests wait
	actBack                // a late worker beat again: ready again
)

// next is the decision at now: a pure function of v, so the tests give it explicit
// times. why explains an actKillHung. With actNone, at is the earliest time at which
// the decision can change by time alone (a deadline: the hang, the idle timeout, the
// backoff's end); the janitor sleeps until then or until an event (a state change, a
// request's end) wakes it. Zero: only an event can change it. Beats and requests
// only ever move a deadline later, so a wake-up at an old deadline just looks again.
func (t timing) next(v view, now time.Time) (act action, why string, at time.Time) {
	switch v.State {
	case gStarting:
		// Hung once more than StartTimeout has passed: at is the first such instant.
		if at = v.Started.Add(t.StartTimeout).Add(1); !now.Before(at) {
			return actKillHung, fmt.Sprintf("hung: no hello %s after its start", t.StartTimeout), time.Time{}
		}
	case gRunning:
		// A worker late by HangAfter is not ready at once (a hung one must be out of
		// service within a second), but killed only after KillAfter: on a busy
		// machine a healthy worker (or this process, which reads the beats) may be
		// starved for a moment, and killing it would lose its requests in flight and
		// its caches. A beat in between makes it ready again.
		kill := v.LastBeat.Add(t.KillAfter).Add(1)
		if !now.Before(kill) {
			return actKillHung, fmt.Sprintf("hung: no heartbeat for %s", now.Sub(v.LastBeat).Round(time.Millisecond)), time.Time{}
		}
		if at = v.LastBeat.Add(t.HangAfter).Add(1); !now.Before(at) {
			if !v.Late {
				return actLate, fmt.Sprintf("late: no heartbeat for %s", now.Sub(v.LastBeat).Round(time.Millisecond)), time.Time{}
			}
			return actNone, "", kill // a late worker is not stopped for idleness: it may be hung
		}
		if v.Late {
			return actBack, "", time.Time{}
		}
		if idle, ok := v.idleAt(); ok {
			if !now.Before(idle) {
				return actStopIdle, "", time.Time{}
			}
			if idle.Before(at) {
				at = idle
			}
		}
	case gStopping:
		if at = v.StopAt.Add(stopGrace); !now.Before(at) {
			return actKillStopping, "", time.Time{}
		}
	case gBackoff:
		if v.Closed {
			return actNone, "", time.Time{}
		}
		if at = v.RestartAt; !now.Before(at) {
			return actRestart, "", time.Time{}
		}
	default:
		return actNone, "", time.Time{}
	}
	return actNone, "", at
}
