package main

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/lmlite/lmlite/engine"
)

// coldSample is one request of `lmlite bench --cold-start`: its time to first token
// as the caller saw it, the engine's usage, what the process spent meanwhile and, for
// a request after an unload, the load's phases as the engine logged them.
type coldSample struct {
	ttft   time.Duration
	u      engine.Usage
	ru     rusage
	load   time.Duration
	phases map[string]float64
}

// coldBreakdown is where the time of the warm or the unloaded requests went: medians.
type coldBreakdown struct {
	AwaitMs   float64            `json:"await_ms"`   // waiting for the model to load (0 warm)
	QueueMs   float64            `json:"queue_ms"`   // submission to the first step (includes the wait)
	ForwardMs float64            `json:"forward_ms"` // the first step: time to first token - queue
	UserMs    float64            `json:"user_ms"`    // process CPU time in user mode during the request
	SysMs     float64            `json:"sys_ms"`     // and in the kernel (page faults land here)
	MinFltK   float64            `json:"minor_faults_k"`
	MajFlt    float64            `json:"major_faults"`
	Phases    map[string]float64 `json:"load_phases_ms,omitempty"` // the engine's "load phases" log line
	PhaseKeys []string           `json:"-"`
}

func breakdown(s []coldSample) coldBreakdown {
	b := coldBreakdown{
		AwaitMs:   medianOf(s, func(x coldSample) float64 { return ms(x.u.ColdStart) }),
		QueueMs:   medianOf(s, func(x coldSample) float64 { return ms(x.u.QueueTime) }),
		ForwardMs: medianOf(s, func(x coldSample) float64 { return ms(x.u.TimeToFirstToken - x.u.QueueTime) }),
		UserMs:    medianOf(s, func(x coldSample) float64 { return ms(x.ru.user) }),
		SysMs:     medianOf(s, func(x coldSample) float64 { return ms(x.ru.sys) }),
		MinFltK:   medianOf(s, func(x coldSample) float64 { return float64(x.ru.minflt) / 1000 }),
		MajFlt:    medianOf(s, func(x coldSample) float64 { return float64(x.ru.majflt) }),
	}
	for _, x := range s {
		for k := range x.phases {
			if !slices.Contains(b.PhaseKeys, k) {
				b.PhaseKeys = append(b.PhaseKeys, k)
			}
		}
	}
	slices.Sort(b.PhaseKeys)
	if len(b.PhaseKeys) > 0 {
		b.Phases = map[string]float64{}
		for _, k := range b.PhaseKeys {
			b.Phases[k] = medianOf(s, func(x coldSample) float64 { return x.phases[k] })
		}
	}
	return b
}

func medianOf[T any](s []T, f func(T) float64) float64 {
	v := make([]float64, len(s))
	for i, x := range s {
		v[i] = f(x)
	}
	if len(v) == 0 {
		return 0
	}
	return median(v)
}

// rusage is the process's resource usage (getrusage(RUSAGE_SELF)).
type rusage struct {
	user, sys      time.Duration
	minflt, majflt int64
}

func getRusage() rusage {
	var r syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r); err != nil {
		return rusage{}
	}
	return rusage{user: time.Duration(r.Utime.Nano()), sys: time.Duration(r.Stime.Nano()), minflt: r.Minflt, majflt: r.Majflt}
}

func (r rusage) sub(o rusage) rusage {
	return rusage{user: r.user - o.user, sys: r.sys - o.sys, minflt: r.minflt - o.minflt, majflt: r.majflt - o.majflt}
}

// phaseLog is a slog handler that keeps the numeric attributes of the engine's last
// "load phases" record (debug level) and passes warnings and errors on to next.
type phaseLog struct {
	next slog.Handler
	seen *phaseSeen // shared by the handlers WithAttrs and WithGroup derive
}

type phaseSeen struct {
	mu   sync.Mutex
	last map[string]float64
}

func newPhaseLog(next slog.Handler) *phaseLog { return &phaseLog{next: next, seen: &phaseSeen{}} }

func (h *phaseLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *phaseLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "load phases" {
		m := map[string]float64{}
		r.Attrs(func(a slog.Attr) bool {
			if a.Value.Kind() == slog.KindFloat64 {
				m[a.Key] = a.Value.Float64()
			}
			return true
		})
		h.seen.mu.Lock()
		h.seen.last = m
		h.seen.mu.Unlock()
	}
	if r.Level >= slog.LevelWarn {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *phaseLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &phaseLog{next: h.next.WithAttrs(as), seen: h.seen}
}

func (h *phaseLog) WithGroup(name string) slog.Handler {
	return &phaseLog{next: h.next.WithGroup(name), seen: h.seen}
}

// last is the last load's phases.
func (h *phaseLog) last() map[string]float64 {
	h.seen.mu.Lock()
	defer h.seen.mu.Unlock()
	return h.seen.last
}
