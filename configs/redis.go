package configs

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisURLEnv names the environment variable that supplies (or overrides) redis.url;
// set alone, it turns Redis on with the other fields' defaults.
const RedisURLEnv = "LMLITE_REDIS_URL"

// AdvertiseEnv names the environment variable that supplies (or overrides)
// redis.advertise, e.g. http://$(POD_IP):8080 on Kubernetes.
const AdvertiseEnv = "LMLITE_ADVERTISE_URL"

// Redis is the `redis:` block: several lmlite processes share their stores through
// one Redis (issue 16). Absent (and LMLITE_REDIS_URL unset), every store stays
// in-process and nothing changes.
type Redis struct {
	URL       string `yaml:"url"`        // redis://[user:pass@]host:port/db, rediss:// or unix://; LMLITE_REDIS_URL overrides it
	KeyPrefix string `yaml:"key_prefix"` // prefix of every key and channel; "lmlite:"
	NodeID    string `yaml:"node_id"`    // this process's name among those sharing the Redis; hostname-pid
	// Leases serves each tenant's budgets, concurrency and requests/s from leases this
	// process holds in Redis (tenancy.LeaseShared), with no round trip per request while
	// a lease covers it; unset: true; false: every request goes to Redis (exact, the
	// per-request path). docs/REDIS.md. LeasesOn reads it.
	Leases *bool `yaml:"leases"`
	// Advertise is the base URL the other processes forward requests to this one at
	// (the model registry); LMLITE_ADVERTISE_URL overrides it; "": http:// and the
	// listen address, with the host name when listen names no host or a wildcard
	// (AdvertiseURL).
	Advertise string `yaml:"advertise"`
	// ForwardFirstByteTimeout is the longest a request forwarded to another process
	// waits for that process's first byte (it answers 102 Processing when its handler
	// takes the request; a stream's headers follow at once); past it the client gets
	// 502 node_unresponsive and the process is passed over for 30 s. 0: 10s.
	ForwardFirstByteTimeout time.Duration `yaml:"forward_first_byte_timeout"`
	// ForwardIdleTimeout is the longest a forwarded event stream may go without a byte
	// from the other process once it has started (that process sends an SSE comment
	// when it has written nothing for a third of it, so a generation that pauses is
	// not cut); past it the stream ends with a node_unresponsive error event and
	// [DONE], and the process is passed over for 30 s. 0: 30s.
	ForwardIdleTimeout time.Duration `yaml:"forward_idle_timeout"`
}

// LeasesOn reports whether budgets and rates are served from leases: Leases, true
// when unset.
func (r *Redis) LeasesOn() bool { return r.Leases == nil || *r.Leases }

// AdvertiseURL is the base URL this process announces: Advertise, or http:// and
// listen (the address the server listens on), with the machine's host name in place
// of an empty or wildcard host.
func (r *Redis) AdvertiseURL(listen string) string {
	if r.Advertise != "" {
		return strings.TrimRight(r.Advertise, "/")
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host, _ = os.Hostname()
	}
	return "http://" + net.JoinHostPort(host, port)
}

// redisDefaults applies LMLITE_REDIS_URL (getenv is os.Getenv outside tests) and
// fills in the block's defaults when Redis is on.
func (c *Config) redisDefaults(getenv func(string) string) {
	if u := getenv(RedisURLEnv); u != "" {
		if c.Redis == nil {
			c.Redis = &Redis{}
		}
		c.Redis.URL = u
	}
	r := c.Redis
	if r == nil {
		return
	}
	if a := getenv(AdvertiseEnv); a != "" {
		r.Advertise = a
	}
	if r.KeyPrefix == "" {
		r.KeyPrefix = "lmlite:"
	}
	if r.Leases == nil {
		on := true
		r.Leases = &on
	}
	if r.NodeID == "" {
		host, _ := os.Hostname()
		r.NodeID = nodeIDChars(host) + "-" + strconv.Itoa(os.Getpid())
	}
}

// nodeIDChars keeps the characters a node id may hold, replacing the others with '-'.
func nodeIDChars(s string) string {
	return strings.Map(func(r rune) rune {
		if nodeIDRune(r) {
			return r
		}
		return '-'
	}, s)
}

func nodeIDRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
}

// validate checks the block; the URL must parse as go-redis parses it. The error
// names the URL's scheme and host only, never its password.
func (r *Redis) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: redis.%s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
	}
	if r.URL == "" {
		return bad("url", "missing (or set %s)", RedisURLEnv)
	}
	if _, err := redis.ParseURL(r.URL); err != nil {
		return bad("url", "not a redis://, rediss:// or unix:// URL: %v", redactURLError(err, r.URL))
	}
	if r.KeyPrefix == "" || strings.ContainsAny(r.KeyPrefix, " \t\r\n{}") || len(r.KeyPrefix) > 64 {
		return bad("key_prefix", "%q must be 1 to 64 characters without spaces or braces", r.KeyPrefix)
	}
	if r.Advertise != "" {
		if u, err := url.Parse(r.Advertise); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return bad("advertise", "%q must be an http:// or https:// base URL such as http://10.0.0.2:8080", r.Advertise)
		}
	}
	if r.ForwardFirstByteTimeout < 0 {
		return bad("forward_first_byte_timeout", "must be ≥ 0 (0: 10s)")
	}
	if r.ForwardIdleTimeout < 0 {
		return bad("forward_idle_timeout", "must be ≥ 0 (0: 30s)")
	}
	if r.NodeID == "" || len(r.NodeID) > 128 || strings.IndexFunc(r.NodeID, func(c rune) bool { return !nodeIDRune(c) }) >= 0 {
		return bad("node_id", "%q must be 1 to 128 of [A-Za-z0-9._-]", r.NodeID)
	}
	return nil
}

// redactURLError keeps a URL's secrets out of an error text that may quote it.
func redactURLError(err error, raw string) string {
	s := err.Error()
	if i := strings.Index(raw, "://"); i >= 0 {
		if j := strings.LastIndex(raw, "@"); j > i {
			s = strings.ReplaceAll(s, raw[i+3:j], "xxxxx")
		}
	}
	return s
}
