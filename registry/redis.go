package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the Store of several processes sharing one Redis. With P the key prefix:
//
//	P reg:nodes     set: the ids of the nodes that have announced themselves
//	P reg:node:ID   string: node ID's announcement as JSON, expiring ttl after it was
//	                written (Redis's clock)
//
// A node that stops announcing disappears when its string expires, whatever the
// clocks of the processes say; Nodes drops its id from the set then.
type Redis struct {
	c      redis.UniversalClient
	prefix string
}

// NewRedis returns the store under keyPrefix ("": "lmlite:").
func NewRedis(c redis.UniversalClient, keyPrefix string) *Redis {
	if keyPrefix == "" {
		keyPrefix = "lmlite:"
	}
	return &Redis{c: c, prefix: keyPrefix}
}

func (r *Redis) setKey() string           { return r.prefix + "reg:nodes" }
func (r *Redis) nodeKey(id string) string { return r.prefix + "reg:node:" + id }

// Announce writes n's announcement, expiring after ttl (at least 1 ms).
func (r *Redis) Announce(ctx context.Context, n Node, ttl time.Duration) error {
	b, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	_, err = r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, r.nodeKey(n.ID), b, max(ttl, time.Millisecond))
		p.SAdd(ctx, r.setKey(), n.ID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("registry: redis announce: %w", err)
	}
	return nil
}

// Withdraw deletes node id's announcement.
func (r *Redis) Withdraw(ctx context.Context, id string) error {
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, r.nodeKey(id))
		p.SRem(ctx, r.setKey(), id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("registry: redis withdraw: %w", err)
	}
	return nil
}

// Nodes reads every announcement still in Redis (two round trips) and forgets the
// ids whose announcement has expired.
func (r *Redis) Nodes(ctx context.Context) ([]Node, error) {
	ids, err := r.c.SMembers(ctx, r.setKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("registry: redis nodes: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	slices.Sort(ids)
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = r.nodeKey(id)
	}
	vals, err := r.c.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("registry: redis nodes: %w", err)
	}
	out := make([]Node, 0, len(ids))
	var gone []any
	for i, v := range vals {
		s, ok := v.(string)
		if !ok { // expired: forget the id
			gone = append(gone, ids[i])
			continue
		}
		var n Node
		if json.Unmarshal([]byte(s), &n) != nil || n.ID != ids[i] {
			continue // not ours to judge: another version may have written it
		}
		out = append(out, n)
	}
	if len(gone) > 0 {
		// Another node may have announced itself again since MGET: remove only ids
		// whose announcement is still missing.
		for _, id := range gone {
			r.c.Eval(ctx, forgetScript, []string{r.setKey(), r.nodeKey(id.(string))}, id)
		}
	}
	return out, nil
}

// forgetScript removes ARGV[1] from the set KEYS[1] unless its announcement KEYS[2]
// exists again.
const forgetScript = `if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('SREM', KEYS[1], ARGV[1]) end return 0`
