package pull

import (
	"math"
	"time"
)

// Progress is the state of one download, passed to Options.Progress.
type Progress struct {
	Ref     string        // the reference as written
	Done    int64         // bytes in the partial file
	Total   int64         // the file's size; -1: unknown
	Resumed int64         // the byte this run resumed at (0: from the start)
	Rate    float64       // bytes per second, smoothed over the last seconds; 0: not yet known
	ETA     time.Duration // time left at Rate; -1: unknown
	Final   bool          // the last call: every byte is in
}

// meter smooths the download rate. It is a pure function of the times and byte
// counts it is given.
type meter struct {
	start    time.Time
	last     time.Time
	lastDone int64
	rate     float64
	primed   bool
	halfLife time.Duration
}

// observe records that done bytes were in at now and returns the smoothed rate
// (an exponentially weighted average with a half-life of m.halfLife, 2s when 0).
func (m *meter) observe(now time.Time, done int64) float64 {
	if m.halfLife == 0 {
		m.halfLife = 2 * time.Second
	}
	if m.start.IsZero() {
		m.start, m.last, m.lastDone = now, now, done
		return 0
	}
	dt := now.Sub(m.last)
	if dt <= 0 {
		return m.rate
	}
	inst := float64(done-m.lastDone) / dt.Seconds()
	if !m.primed {
		m.rate, m.primed = inst, true
	} else {
		// weight of the old rate after dt: 2^(-dt/halfLife)
		w := math.Exp2(-dt.Seconds() / m.halfLife.Seconds())
		m.rate = w*m.rate + (1-w)*inst
	}
	m.last, m.lastDone = now, done
	return m.rate
}

// eta is the time left for total-done bytes at rate; -1 when either is unknown.
func eta(done, total int64, rate float64) time.Duration {
	if total < 0 || rate <= 0 {
		return -1
	}
	left := float64(total-done) / rate
	return time.Duration(left * float64(time.Second)).Round(time.Second)
}
