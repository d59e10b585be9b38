package rediscli

import (
	"context"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Metrics measures a client's commands. Register it with a prometheus registry; one
// Metrics may serve several clients. Fallback is for the stores: they count each
// time Redis was unreachable and a resource fell back to its failure policy.
type Metrics struct {
	latency   *prometheus.HistogramVec // by command
	errors    *prometheus.CounterVec   // by command and kind
	dials     *prometheus.CounterVec   // by result
	fallbacks *prometheus.CounterVec   // by resource
}

// NewMetrics returns unregistered metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lmlite_redis_command_duration_seconds",
			Help:    "Latency of Redis commands (a pipeline counts once, as \"pipeline\"), retries included.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}, []string{"command"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lmlite_redis_errors_total",
			Help: "Redis commands that failed, by command and kind (network, timeout, server, closed, canceled); a missing key is not an error."}, []string{"command", "kind"}),
		dials: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lmlite_redis_dials_total",
			Help: "Connections dialled to Redis, by result (ok, error): reconnects after a failure show here."}, []string{"result"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lmlite_redis_fallbacks_total",
			Help: "Times a resource fell back to its failure policy because Redis did not answer, by resource."}, []string{"resource"}),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.latency.Describe(ch)
	m.errors.Describe(ch)
	m.dials.Describe(ch)
	m.fallbacks.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.latency.Collect(ch)
	m.errors.Collect(ch)
	m.dials.Collect(ch)
	m.fallbacks.Collect(ch)
}

// Fallback counts one fallback of resource (e.g. "budget", "rate", "lease").
func (m *Metrics) Fallback(resource string) { m.fallbacks.WithLabelValues(resource).Inc() }

func (m *Metrics) observe(command string, start time.Time, err error) {
	m.latency.WithLabelValues(command).Observe(time.Since(start).Seconds())
	if k := errorKind(err); k != "" {
		m.errors.WithLabelValues(command, k).Inc()
	}
}

type hook struct{ m *Metrics }

func (m *Metrics) hook() redis.Hook { return hook{m} }

func (h hook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			h.m.dials.WithLabelValues("error").Inc()
		} else {
			h.m.dials.WithLabelValues("ok").Inc()
		}
		return c, err
	}
}

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		h.m.observe(cmd.Name(), start, err)
		return err
	}
}

func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		seen := err
		for _, c := range cmds { // a pipeline may succeed as a whole while a command fails
			if e := c.Err(); seen == nil && errorKind(e) != "" {
				seen = e
			}
		}
		h.m.observe("pipeline", start, seen)
		return err
	}
}
