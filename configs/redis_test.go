package configs

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func parseWithRedis(t *testing.T, block string) (*Config, error) {
	t.Helper()
	c, err := Parse(append(append([]byte{}, Example...), block...))
	if err != nil {
		return nil, err
	}
	return c, c.Validate()
}

func TestRedisAbsentChangesNothing(t *testing.T) {
	t.Setenv(RedisURLEnv, "")
	c, err := parseWithRedis(t, "")
	if err != nil || c.Redis != nil {
		t.Fatalf("no redis block: %+v %v", c.Redis, err)
	}
}

func TestRedisBlockDefaults(t *testing.T) {
	t.Setenv(RedisURLEnv, "")
	c, err := parseWithRedis(t, "redis: {url: redis://127.0.0.1:6390/2}\n")
	if err != nil {
		t.Fatal(err)
	}
	r := c.Redis
	if r.URL != "redis://127.0.0.1:6390/2" || r.KeyPrefix != "lmlite:" || r.NodeID == "" || !r.LeasesOn() {
		t.Fatalf("defaults: %+v", r)
	}
	if err := r.validate(); err != nil {
		t.Fatalf("the default node id is not valid: %v", err)
	}
	c, err = parseWithRedis(t, "redis: {url: 'rediss://u:p@db:6380/0', key_prefix: 'shop:', node_id: gw-1}\n")
	if err != nil || c.Redis.KeyPrefix != "shop:" || c.Redis.NodeID != "gw-1" {
		t.Fatalf("explicit: %+v %v", c.Redis, err)
	}
	c, err = parseWithRedis(t, "redis: {url: redis://127.0.0.1:6390/2, leases: false}\n")
	if err != nil || c.Redis.LeasesOn() {
		t.Fatalf("leases: false, the per-request path: %+v %v", c.Redis, err)
	}
}

// TestRedisURLFromEnv: LMLITE_REDIS_URL overrides the file's url, and alone turns
// Redis on.
func TestRedisURLFromEnv(t *testing.T) {
	t.Setenv(RedisURLEnv, "redis://10.0.0.5:7000/1")
	c, err := parseWithRedis(t, "redis: {url: redis://127.0.0.1:6390/0, node_id: a}\n")
	if err != nil || c.Redis.URL != "redis://10.0.0.5:7000/1" || c.Redis.NodeID != "a" {
		t.Fatalf("override: %+v %v", c.Redis, err)
	}
	c, err = parseWithRedis(t, "")
	if err != nil || c.Redis == nil || c.Redis.URL != "redis://10.0.0.5:7000/1" || c.Redis.KeyPrefix != "lmlite:" {
		t.Fatalf("env alone: %+v %v", c.Redis, err)
	}
}

func TestRedisInvalid(t *testing.T) {
	t.Setenv(RedisURLEnv, "")
	for _, tc := range []struct{ block, field string }{
		{"redis: {key_prefix: x}\n", "redis.url"},
		{"redis: {url: 'http://127.0.0.1:6379'}\n", "redis.url"},
		{"redis: {url: 'redis://127.0.0.1:6379/notadb'}\n", "redis.url"},
		{"redis: {url: 'redis://127.0.0.1:6379/0', key_prefix: 'a b'}\n", "redis.key_prefix"},
		{"redis: {url: 'redis://127.0.0.1:6379/0', key_prefix: '{x}'}\n", "redis.key_prefix"},
		{"redis: {url: 'redis://127.0.0.1:6379/0', node_id: 'a:b'}\n", "redis.node_id"},
		{"redis: {url: 'redis://127.0.0.1:6379/0', bogus: 1}\n", "bogus"},
		{"redis: {url: 'redis://127.0.0.1:6379/0', advertise: '10.0.0.2:8080'}\n", "redis.advertise"},
		{"redis: {url: 'redis://127.0.0.1:6379/0', advertise: 'ftp://h:1'}\n", "redis.advertise"},
		{"redis: {url: 'redis://127.0.0.1:6379/0', forward_first_byte_timeout: -1s}\n", "redis.forward_first_byte_timeout"},
		{"redis: {url: 'redis://127.0.0.1:6379/0', forward_idle_timeout: -1s}\n", "redis.forward_idle_timeout"},
	} {
		_, err := parseWithRedis(t, tc.block)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%q: %v, want an error naming %s", tc.block, err, tc.field)
		}
	}
}

// TestRedisURLErrorHidesPassword: a bad URL's error never quotes its password.
func TestRedisURLErrorHidesPassword(t *testing.T) {
	t.Setenv(RedisURLEnv, "")
	_, err := parseWithRedis(t, "redis: {url: 'redis://user:s3cret@127.0.0.1:6379/notadb'}\n")
	if !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error %v", err)
	}
	_, err = parseWithRedis(t, "redis: {url: 'redis://user:s3cret@127.0.0.1:bad port/0'}\n")
	if !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error %v", err)
	}
}

func TestRedisAdvertiseURL(t *testing.T) {
	host, _ := os.Hostname()
	for _, tc := range []struct{ advertise, listen, want string }{
		{"", "127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"", "[::1]:8080", "http://[::1]:8080"},
		{"", ":8080", "http://" + host + ":8080"},
		{"", "0.0.0.0:9090", "http://" + host + ":9090"},
		{"https://gw-1.internal:8443/", "127.0.0.1:8080", "https://gw-1.internal:8443"},
	} {
		if got := (&Redis{Advertise: tc.advertise}).AdvertiseURL(tc.listen); got != tc.want {
			t.Errorf("advertise %q listen %q: %q, want %q", tc.advertise, tc.listen, got, tc.want)
		}
	}
}

// TestAdvertiseFromEnv: LMLITE_ADVERTISE_URL overrides redis.advertise, and is
// validated like it.
func TestAdvertiseFromEnv(t *testing.T) {
	t.Setenv(RedisURLEnv, "")
	t.Setenv(AdvertiseEnv, "http://10.1.2.3:8080")
	c, err := parseWithRedis(t, "redis: {url: redis://127.0.0.1:6390/0, advertise: 'http://elsewhere:1'}\n")
	if err != nil || c.Redis.AdvertiseURL("0.0.0.0:8080") != "http://10.1.2.3:8080" {
		t.Fatalf("override: %+v %v", c.Redis, err)
	}
	t.Setenv(AdvertiseEnv, "10.1.2.3:8080")
	if _, err := parseWithRedis(t, "redis: {url: redis://127.0.0.1:6390/0}\n"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bad LMLITE_ADVERTISE_URL: %v", err)
	}
}
