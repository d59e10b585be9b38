package worker

import "time"

// Defaults of Policy and of the Pool's timing.
const (
	DefaultBeat       = 100 * time.Millisecond // a worker's heartbeat interval (at most 250 ms by the issue)
	DefaultHangAfter  = 700 * time.Millisecond // no heartbeat for this long: hung (killed and restarted)
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
