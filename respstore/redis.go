package respstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/sweep.lua
	sweepLua string
	//go:embed lua/sweep_tenant.lua
	sweepTenantLua string
	//go:embed lua/put.lua
	putLua string
	//go:embed lua/delete.lua
	deleteLua string
	//go:embed lua/conversation.lua
	conversationLua string

	putScript          = redis.NewScript(sweepLua + putLua)
	sweepScript        = redis.NewScript(sweepLua + sweepTenantLua)
	deleteScript       = redis.NewScript(deleteLua)
	conversationScript = redis.NewScript(conversationLua)
)

// Redis is the Store of several processes sharing one Redis: any of them reads,
// deletes and continues any response. With P the key prefix and T a tenant:
//
//	P resp:{T}:id:ID   hash: the record (c created, e expires, m model, p previous,
//	                   r response, i and o the encoded input and output items, cb their JSON's bytes);
//	                   expires at e (PEXPIREAT)
//	P resp:{T}:exp     sorted set: ID → expires (Unix ms), the tenant's responses by expiry
//	P resp:{T}:size    hash: ID → Record.Size
//	P resp:{T}:usage   hash: n (count), b (bytes) of the tenant's responses
//	P resp:tenants     set: the tenants that stored a response (Sweep's list)
//
// The tenant is in every key (another tenant's id names a key that does not exist)
// and is their hash tag, so one tenant's keys share a slot and each change is one
// Lua script (lua/*.lua): Put stores a record with its index and usage, within the
// tenant's limits, after sweeping the tenant's expired responses; Delete and Sweep
// remove them together; Conversation walks a chain in one round trip. A record's key
// expires by Redis's clock at its expiry, and reads check its expiry against their
// explicit now; its index entries stay (counted in Usage) until a Sweep or a Put of
// the tenant's removes them.
//
// Conversation's script holds Redis while it walks: about 20 µs a response on a
// shared 2-core machine (BenchmarkConversation: 0.16 ms at depth 10, 2 ms at 100), so
// a chain at the 1000-response bound costs about 20 ms of Redis's time.
type Redis struct {
	c      redis.UniversalClient
	prefix string
	o      Options
}

// NewRedis returns the store in c under keyPrefix ("" : "lmlite:").
func NewRedis(c redis.UniversalClient, keyPrefix string, o Options) *Redis {
	if keyPrefix == "" {
		keyPrefix = "lmlite:"
	}
	return &Redis{c: c, prefix: keyPrefix, o: o.withDefaults()}
}

// base is the prefix of the tenant's keys.
func (s *Redis) base(tenant string) string { return s.prefix + "resp:{" + tenant + "}:" }

func (s *Redis) tenantsKey() string { return s.prefix + "resp:tenants" }

// keys are a Put's or Delete's KEYS: the record, the exp zset, the size and usage hashes.
func (s *Redis) keys(tenant, id string) []string {
	b := s.base(tenant)
	return []string{b + "id:" + id, b + "exp", b + "size", b + "usage"}
}

func redisErr(err error) error { return fmt.Errorf("respstore: redis: %w", err) }

func (s *Redis) Put(ctx context.Context, rec Record) error {
	return s.PutWithin(ctx, rec, s.o.limitsOf(rec.Tenant))
}

func (s *Redis) PutWithin(ctx context.Context, rec Record, lim Limits) error {
	rec, err := s.o.prepare(rec)
	if err != nil {
		return err
	}
	// The tenant joins Sweep's list first: a response is never stored where Sweep does not look.
	if err := s.c.SAdd(ctx, s.tenantsKey(), rec.Tenant).Err(); err != nil {
		return redisErr(err)
	}
	res, err := putScript.Run(ctx, s.c, s.keys(rec.Tenant, rec.ID),
		s.base(rec.Tenant), rec.ID, rec.Created.UnixMilli(), rec.Expires.UnixMilli(), rec.Size(),
		lim.MaxCount, lim.MaxBytes, sweepPerTx,
		rec.Model, rec.Previous, rec.Response, appendItems(nil, rec.Input), appendItems(nil, rec.Output), rec.itemBytes()).Int()
	switch {
	case err != nil:
		return redisErr(err)
	case res == 1:
		return &LimitError{Limit: "responses_max_count", Max: lim.MaxCount}
	case res == 2:
		return &LimitError{Limit: "responses_max_bytes", Max: lim.MaxBytes}
	}
	return nil
}

func (s *Redis) Get(ctx context.Context, tenant, id string, now time.Time) (Record, error) {
	if !validID(tenant) || !validID(id) {
		return Record{}, ErrNotFound
	}
	vs, err := s.c.HMGet(ctx, s.base(tenant)+"id:"+id, "c", "e", "m", "p", "r", "i", "o").Result()
	if err != nil {
		return Record{}, redisErr(err)
	}
	var f [7]string
	for i, v := range vs {
		str, ok := v.(string)
		if !ok {
			return Record{}, ErrNotFound // missing (or half written: never, HSET is one command)
		}
		f[i] = str
	}
	created, err1 := strconv.ParseInt(f[0], 10, 64)
	exp, err2 := strconv.ParseInt(f[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Record{}, fmt.Errorf("%w: %s/%s: %v", errCorrupt, tenant, id, err)
	}
	if expired(exp, now) {
		return Record{}, ErrNotFound
	}
	rec := Record{Tenant: tenant, ID: id, Created: time.UnixMilli(created), Expires: time.UnixMilli(exp),
		Model: f[2], Previous: f[3], Response: []byte(f[4])}
	if rec.Input, err = decodeItems([]byte(f[5])); err != nil {
		return Record{}, err
	}
	if rec.Output, err = decodeItems([]byte(f[6])); err != nil {
		return Record{}, err
	}
	return rec, nil
}

func (s *Redis) Delete(ctx context.Context, tenant, id string, now time.Time) error {
	if !validID(tenant) || !validID(id) {
		return ErrNotFound
	}
	n, err := deleteScript.Run(ctx, s.c, s.keys(tenant, id), id, now.UnixMilli()).Int()
	if err != nil {
		return redisErr(err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

func (s *Redis) InputItems(ctx context.Context, tenant, id string, p Page, now time.Time) ([]Item, bool, error) {
	if !validID(tenant) || !validID(id) {
		return nil, false, ErrNotFound
	}
	vs, err := s.c.HMGet(ctx, s.base(tenant)+"id:"+id, "e", "i").Result()
	if err != nil {
		return nil, false, redisErr(err)
	}
	e, ok1 := vs[0].(string)
	enc, ok2 := vs[1].(string)
	if !ok1 || !ok2 {
		return nil, false, ErrNotFound
	}
	exp, err := strconv.ParseInt(e, 10, 64)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %s/%s: %v", errCorrupt, tenant, id, err)
	}
	if expired(exp, now) {
		return nil, false, ErrNotFound
	}
	items, err := decodeItems([]byte(enc))
	if err != nil {
		return nil, false, err
	}
	return page(items, p)
}

func (s *Redis) Conversation(ctx context.Context, tenant, id string, now time.Time) ([]Item, error) {
	if !validID(tenant) || !validID(id) {
		return nil, ErrNotFound
	}
	base := s.base(tenant) + "id:"
	res, err := conversationScript.Run(ctx, s.c, []string{base + id}, base, now.UnixMilli(),
		s.o.MaxDepth, s.o.MaxConversationBytes).Slice()
	if err != nil {
		return nil, redisErr(err)
	}
	if len(res) == 0 {
		return nil, errCorrupt
	}
	status, _ := res[0].(int64)
	switch status {
	case 0:
		return nil, ErrNotFound
	case -1:
		prev, _ := res[1].(string)
		return nil, missingError(prev, id)
	case -2:
		return nil, &ConversationError{Limit: "depth", Max: int64(s.o.MaxDepth)}
	case -3:
		return nil, &ConversationError{Limit: "bytes", Max: s.o.MaxConversationBytes}
	}
	chain := make([][]Item, 0, len(res)/2)
	for i := 1; i+1 < len(res); i += 2 {
		in, _ := res[i].(string)
		out, _ := res[i+1].(string)
		items, err := decodeItems([]byte(in))
		if err != nil {
			return nil, err
		}
		outs, err := decodeItems([]byte(out))
		if err != nil {
			return nil, err
		}
		chain = append(chain, append(items, outs...))
	}
	return oldestFirst(chain), nil
}

func (s *Redis) Sweep(ctx context.Context, now time.Time) (int, error) {
	tenants, err := s.c.SMembers(ctx, s.tenantsKey()).Result()
	if err != nil {
		return 0, redisErr(err)
	}
	return sweepTenants(ctx, tenants, now, s.SweepTenant)
}

func (s *Redis) SweepTenant(ctx context.Context, tenant string, now time.Time) (int, error) {
	if !validID(tenant) {
		return 0, nil
	}
	base := s.base(tenant)
	removed := 0
	for {
		n, err := sweepScript.Run(ctx, s.c, []string{base + "usage"}, base, now.UnixMilli(), sweepPerTx).Int()
		removed += n
		if err != nil {
			return removed, redisErr(err)
		}
		if n < sweepPerTx {
			return removed, nil
		}
	}
}

func (s *Redis) Usage(ctx context.Context, tenant string) (Usage, error) {
	if !validID(tenant) {
		return Usage{}, nil
	}
	vs, err := s.c.HMGet(ctx, s.base(tenant)+"usage", "n", "b").Result()
	if err != nil {
		return Usage{}, redisErr(err)
	}
	var u Usage
	for i, p := range []*int64{&u.Count, &u.Bytes} {
		if str, ok := vs[i].(string); ok {
			if *p, err = strconv.ParseInt(str, 10, 64); err != nil {
				return Usage{}, fmt.Errorf("%w: usage of %s: %v", errCorrupt, tenant, err)
			}
		}
	}
	return u, nil
}
