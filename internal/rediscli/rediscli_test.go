package rediscli

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/internal/redistest"
)

func TestNewRejectsBadURL(t *testing.T) {
	if _, err := New(Options{URL: "http://127.0.0.1:1"}); err == nil || !strings.HasPrefix(err.Error(), "rediscli: ") {
		t.Fatalf("bad scheme: %v", err)
	}
}

// TestMetricsCountLatencyAndErrors: every command is timed; a missing key is not an
// error, an error reply is a server error, a dead server a network error.
func TestMetricsCountLatencyAndErrors(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	m := NewMetrics()
	prometheus.NewPedanticRegistry().MustRegister(m) // a valid collector
	c, err := New(Options{URL: s.URL(0), Name: "node-a", Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, "missing").Err(); !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	if err := c.LPush(ctx, "k", "x").Err(); err == nil { // WRONGTYPE
		t.Fatal("LPUSH on a string succeeded")
	}
	if name, err := c.ClientGetName(ctx).Result(); err != nil || name != "node-a" {
		t.Fatalf("client name %q %v", name, err)
	}
	pipe := c.Pipeline()
	pipe.Get(ctx, "k")
	pipe.Incr(ctx, "k") // not an integer: a server error inside a pipeline
	pipe.Exec(ctx)

	if n := testutil.CollectAndCount(m.latency); n < 5 {
		t.Errorf("latency series %d, want one per command name", n)
	}
	for _, tc := range []struct {
		cmd, kind string
		want      float64
	}{
		{"get", "server", 0}, {"get", "network", 0}, // the miss is not an error
		{"lpush", "server", 1},
		{"pipeline", "server", 1},
	} {
		if got := testutil.ToFloat64(m.errors.WithLabelValues(tc.cmd, tc.kind)); got != tc.want {
			t.Errorf("errors{%s,%s} = %v, want %v", tc.cmd, tc.kind, got, tc.want)
		}
	}
	if got := testutil.ToFloat64(m.dials.WithLabelValues("ok")); got < 1 {
		t.Errorf("dials ok %v", got)
	}
	m.Fallback("lease")
	if got := testutil.ToFloat64(m.fallbacks.WithLabelValues("lease")); got != 1 {
		t.Errorf("fallbacks %v", got)
	}
}

// TestReconnectsAfterRestart: with the server killed a command fails fast (not after
// go-redis's default 5 s timeouts), and once it is back the next command succeeds on a
// new connection without any action from the caller.
func TestReconnectsAfterRestart(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{})
	m := NewMetrics()
	c, err := New(Options{URL: s.URL(0), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	start := time.Now()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered by a dead server")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a command against a dead server took %v", d)
	}
	if got := testutil.ToFloat64(m.errors.WithLabelValues("ping", "network")); got != 1 {
		t.Errorf("network errors of ping %v", got)
	}
	if got := testutil.ToFloat64(m.dials.WithLabelValues("error")); got < 1 {
		t.Errorf("failed dials %v", got)
	}
	s.Restart()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("first PING after restart: %v", err)
	}
}

func TestErrorKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{redis.Nil, ""},
		{context.Canceled, "canceled"},
		{context.DeadlineExceeded, "timeout"},
		{redis.ErrClosed, "closed"},
		{errors.New("dial tcp: connection refused"), "network"},
	} {
		if got := errorKind(tc.err); got != tc.want {
			t.Errorf("errorKind(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
