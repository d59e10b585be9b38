// Package rediscli builds the go-redis v9 client every Redis-backed store of lmlite
// shares: its timeouts and reconnect backoff, and a hook that measures each command's
// latency and counts its errors (Metrics, a prometheus.Collector).
//
// go-redis reconnects by itself: a broken connection is dropped from the pool and the
// next command dials again (DialerRetries times, with a growing delay), and a command
// that fails on the network is retried MaxRetries times with an exponential backoff
// between MinRetryBackoff and MaxRetryBackoff. The defaults here keep a dead Redis
// from holding a request for long: a command gives up after about a second, so that
// the caller's failure policy (fail closed for money, a local share for rates) applies
// quickly, and the first command after Redis returns succeeds.
package rediscli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Options configure New. The zero value of every field but URL has a default.
type Options struct {
	URL  string // redis://[user:pass@]host:port/db, rediss:// or unix://
	Name string // CLIENT SETNAME of the connections (the node id); "": none

	DialTimeout     time.Duration // per dial; 500ms
	CommandTimeout  time.Duration // read and write timeout of a command; 500ms
	MaxRetries      int           // retries of a command that failed on the network; 2 (-1: none)
	MinRetryBackoff time.Duration // first retry delay; 8ms
	MaxRetryBackoff time.Duration // longest retry delay; 256ms
	PoolSize        int           // connections; go-redis's default (10 per CPU)

	Metrics *Metrics // nil: no metrics
}

// New returns a client for o.URL; it does not connect until the first command (Ping
// it to check the server at start-up). Close it when done.
func New(o Options) (*redis.Client, error) {
	opt, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("rediscli: %w", err)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.DialTimeout, 500*time.Millisecond)
	def(&o.CommandTimeout, 500*time.Millisecond)
	def(&o.MinRetryBackoff, 8*time.Millisecond)
	def(&o.MaxRetryBackoff, 256*time.Millisecond)
	if o.MaxRetries == 0 {
		o.MaxRetries = 2
	}
	opt.ClientName = o.Name
	opt.DialTimeout = o.DialTimeout
	opt.ReadTimeout, opt.WriteTimeout = o.CommandTimeout, o.CommandTimeout
	opt.ContextTimeoutEnabled = true // a request's deadline bounds its Redis calls
	opt.MaxRetries = o.MaxRetries
	opt.MinRetryBackoff, opt.MaxRetryBackoff = o.MinRetryBackoff, o.MaxRetryBackoff
	opt.DialerRetries = 3
	opt.DialerRetryBackoff = func(attempt int) time.Duration { // 20ms, 40ms, 80ms, …
		return min(20*time.Millisecond<<attempt, o.MaxRetryBackoff)
	}
	if o.PoolSize > 0 {
		opt.PoolSize = o.PoolSize
	}
	// Cluster maintenance notifications are for Redis Enterprise/Cloud; on a plain
	// server the handshake only adds a failing command to every connection.
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	// CLIENT SETINFO (the library's name) is an error reply before Redis 7.2, which
	// would count as a failed command on every new connection.
	opt.DisableIdentity = true
	c := redis.NewClient(opt)
	if o.Metrics != nil {
		c.AddHook(o.Metrics.hook())
	}
	return c, nil
}

// errorKind classifies an error for the metrics; "" for no error and for redis.Nil
// (a missing key is an answer, not a failure).
func errorKind(err error) string {
	var ne net.Error
	switch {
	case err == nil, errors.Is(err, redis.Nil):
		return ""
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, redis.ErrClosed):
		return "closed"
	}
	var re redis.Error
	if errors.As(err, &re) {
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			return "" // EVALSHA of a script the server has not seen yet: go-redis sends EVAL next
		}
		return "server" // an error reply: a script error, WRONGTYPE, OOM, …
	}
	return "network"
}
