package tiers

import (
	"sync"
	"time"
)

// Predictor keeps the live statistics of each model: moving averages of the time to
// first token and the time per output token, the requests in flight, and whether the
// model failed recently. It is safe for concurrent use; the zero value is not (use
// NewPredictor).
type Predictor struct {
	// Alpha is the weight of a new sample in the moving averages (0 < Alpha ≤ 1).
	Alpha float64
	// Cooldown is how long a model counts as failing after a failure.
	Cooldown time.Duration

	mu     sync.Mutex // guards models
	models map[string]*modelStats
}

type modelStats struct {
	ttft, tpot   float64 // nanoseconds, moving averages; 0 until the first sample
	inFlight     int
	slots        int
	maxQueue     int
	failingUntil time.Time
}

// NewPredictor returns a Predictor with Alpha 0.2 and a Cooldown of 10s.
func NewPredictor() *Predictor {
	return &Predictor{Alpha: 0.2, Cooldown: 10 * time.Second, models: map[string]*modelStats{}}
}

func (p *Predictor) modelLocked(model string) *modelStats {
	m := p.models[model]
	if m == nil {
		m = &modelStats{}
		p.models[model] = m
	}
	return m
}

// SetCapacity sets how many requests a model serves at once and the queue depth at
// which it counts as overloaded (0: no limit).
func (p *Predictor) SetCapacity(model string, slots, maxQueue int) {
	p.mu.Lock()
	m := p.modelLocked(model)
	m.slots, m.maxQueue = slots, maxQueue
	p.mu.Unlock()
}

// Begin counts a request in flight on model; End must follow.
func (p *Predictor) Begin(model string) {
	p.mu.Lock()
	p.modelLocked(model).inFlight++
	p.mu.Unlock()
}

// End counts a request out of flight.
func (p *Predictor) End(model string) {
	p.mu.Lock()
	if m := p.models[model]; m != nil && m.inFlight > 0 {
		m.inFlight--
	}
	p.mu.Unlock()
}

// Observe records a successful request's time to first token and mean time per
// output token (0 when it produced one token or fewer) and clears a failure mark.
func (p *Predictor) Observe(model string, ttft, tpot time.Duration) {
	p.mu.Lock()
	m := p.modelLocked(model)
	m.ttft = ewma(m.ttft, float64(ttft), p.Alpha)
	if tpot > 0 {
		m.tpot = ewma(m.tpot, float64(tpot), p.Alpha)
	}
	m.failingUntil = time.Time{}
	p.mu.Unlock()
}

// Fail marks model as failing until now+Cooldown.
func (p *Predictor) Fail(model string, now time.Time) {
	p.mu.Lock()
	p.modelLocked(model).failingUntil = now.Add(p.Cooldown)
	p.mu.Unlock()
}

// Stats returns the snapshot of model at now.
func (p *Predictor) Stats(model string, now time.Time) Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.models[model]
	if m == nil {
		return Stats{}
	}
	return Stats{
		TTFT:     time.Duration(m.ttft),
		TPOT:     time.Duration(m.tpot),
		Queue:    m.inFlight,
		Slots:    m.slots,
		MaxQueue: m.maxQueue,
		Failing:  now.Before(m.failingUntil),
	}
}

func ewma(old, sample, alpha float64) float64 {
	if old == 0 {
		return sample
	}
	return old + alpha*(sample-old)
}
