package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisKeys keeps the API keys of several processes in one Redis. With P the key
// prefix:
//
//	P keys      hash: key id → the KeyInfo as JSON (tenant, created, revoked, SHA-256 hash of the secret; never the secret)
//	P keys:ver  string: a counter bumped by every create and revoke
//
// Each process keeps a copy and polls the counter every 250ms, reloading the hash when
// it changed, so a revocation made anywhere is seen everywhere within about 250ms (1s
// at most with the client's retries), and authentication costs no round trip. A key id
// not in the copy is looked up directly (a key made a moment ago elsewhere). While
// Redis is down the copy keeps authenticating (revocations made meanwhile wait for it).
type RedisKeys struct {
	c      redis.UniversalClient
	prefix string

	mu   sync.RWMutex
	keys map[string]*KeyInfo
	ver  int64
	miss map[string]bool // ids looked up in vain since the last poll: not asked again until the next
	down bool            // the last poll failed: unknown ids are not looked up

	stop chan struct{}
	done chan struct{}
}

// NewRedisKeys loads the keys from Redis and, when poll is true, starts following
// changes (Close stops it); a CLI that only creates or lists passes false.
func NewRedisKeys(c redis.UniversalClient, keyPrefix string, poll bool) (*RedisKeys, error) {
	if keyPrefix == "" {
		keyPrefix = "lmlite:"
	}
	k := &RedisKeys{c: c, prefix: keyPrefix, keys: map[string]*KeyInfo{}, ver: -1, stop: make(chan struct{}), done: make(chan struct{})}
	if err := k.refresh(); err != nil {
		return nil, err
	}
	if poll {
		go k.follow()
	} else {
		close(k.done)
	}
	return k, nil
}

// Close stops following changes.
func (k *RedisKeys) Close() {
	select {
	case <-k.stop:
	default:
		close(k.stop)
	}
	<-k.done
}

func (k *RedisKeys) hashKey() string { return k.prefix + "keys" }
func (k *RedisKeys) verKey() string  { return k.prefix + "keys:ver" }

func (k *RedisKeys) follow() {
	defer close(k.done)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
			err := k.refresh() // Redis down: keep the copy
			k.mu.Lock()
			k.miss, k.down = nil, err != nil
			k.mu.Unlock()
		}
	}
}

// refresh reloads the keys if their version changed.
func (k *RedisKeys) refresh() error {
	c, cancel := ctx()
	defer cancel()
	ver, err := k.c.Get(c, k.verKey()).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("tenancy: redis keys: %w", err)
	}
	k.mu.RLock()
	same := ver == k.ver
	k.mu.RUnlock()
	if same {
		return nil
	}
	all, err := k.c.HGetAll(c, k.hashKey()).Result()
	if err != nil {
		return fmt.Errorf("tenancy: redis keys: %w", err)
	}
	keys := make(map[string]*KeyInfo, len(all))
	for id, v := range all {
		var ki KeyInfo
		if json.Unmarshal([]byte(v), &ki) == nil {
			keys[id] = &ki
		}
	}
	k.mu.Lock()
	k.keys, k.ver = keys, ver
	k.mu.Unlock()
	return nil
}

func (k *RedisKeys) put(ki *KeyInfo) error {
	v, err := json.Marshal(ki)
	if err != nil {
		return fmt.Errorf("tenancy: %w", err)
	}
	c, cancel := ctx()
	defer cancel()
	p := k.c.TxPipeline()
	p.HSet(c, k.hashKey(), ki.ID, v)
	p.Incr(c, k.verKey())
	if _, err := p.Exec(c); err != nil {
		return fmt.Errorf("tenancy: redis store key: %w", err)
	}
	k.mu.Lock()
	cp := *ki
	k.keys[ki.ID] = &cp
	k.mu.Unlock()
	return nil
}

// CreateKey makes and stores a new key for tenant and returns it (the only time the
// key is visible) with its record.
func (k *RedisKeys) CreateKey(tenant string, now time.Time) (string, KeyInfo, error) {
	if tenant == "" {
		return "", KeyInfo{}, errors.New("tenancy: empty tenant")
	}
	key, ki := NewKey(tenant, now)
	if err := k.put(&ki); err != nil {
		return "", KeyInfo{}, err
	}
	return key, ki, nil
}

// lookup returns the key record with id, from the copy or else from Redis.
func (k *RedisKeys) lookup(id string) (*KeyInfo, bool) {
	k.mu.RLock()
	ki, ok := k.keys[id]
	skip := k.miss[id] || k.down
	k.mu.RUnlock()
	if ok {
		return ki, true
	}
	if skip { // bad ids cost one lookup per poll, and none while Redis is down
		return nil, false
	}
	c, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v, err := k.c.HGet(c, k.hashKey(), id).Result()
	if err != nil {
		k.mu.Lock()
		if k.miss == nil {
			k.miss = map[string]bool{}
		}
		if len(k.miss) < 1<<16 {
			k.miss[id] = true
		}
		k.mu.Unlock()
		return nil, false
	}
	var n KeyInfo
	if json.Unmarshal([]byte(v), &n) != nil {
		return nil, false
	}
	k.mu.Lock()
	k.keys[id] = &n
	k.mu.Unlock()
	return &n, true
}

// RevokeKey revokes the key with the given id (or a whole key: its id is taken).
func (k *RedisKeys) RevokeKey(id string, now time.Time) (KeyInfo, error) {
	if kid, _, err := ParseKey(id); err == nil {
		id = kid
	}
	if err := k.refresh(); err != nil {
		return KeyInfo{}, err
	}
	p, ok := k.lookup(id)
	if !ok {
		return KeyInfo{}, fmt.Errorf("%w: %q", ErrNoKey, id)
	}
	ki := *p
	if ki.Revoked.IsZero() {
		ki.Revoked = now.UTC()
		if err := k.put(&ki); err != nil {
			return KeyInfo{}, err
		}
	}
	ki.Hash = nil
	return ki, nil
}

// Keys lists the keys, sorted by tenant then creation.
func (k *RedisKeys) Keys() []KeyInfo {
	_ = k.refresh()
	return listKeys(&k.mu, k.keys)
}

// Authenticate returns the tenant and key id of an API key. Any failure is ErrBadKey
// (or ErrRevoked wrapping it), never saying which part was wrong.
func (k *RedisKeys) Authenticate(key string) (tenant, keyID string, err error) {
	id, secret, err := ParseKey(key)
	if err != nil {
		return "", "", err
	}
	ki, ok := k.lookup(id)
	return authenticate(ki, ok, id, secret)
}
