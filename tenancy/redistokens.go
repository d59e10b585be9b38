package tenancy

import (
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"
)

// tokensScript answers whether need tokens are left of a tenant's tokens/min (the
// GCRA state in its hash's =tpm field) as the admission script decides it (the
// prompt's tokens must be left, none taken), taking nothing: {1, left} or {0, left}.
// KEYS: s; ARGV: burst rate period need
var tokensScript = redis.NewScript(luaGCRAAt + tokensLua)

//go:embed lua/tokens.lua
var tokensLua string

// CheckTokens is Ticket.CheckTokens on the shared state (tokenChecker): q's
// tokens/min against promptTokens for a request admitted before its body was read
// (Admit with no estimate), one round trip that takes nothing. While Redis is down,
// or when it fails, this process's share of the limit (admitLocal's) decides.
func (r *RedisShared) CheckTokens(q *Quota, now time.Time, promptTokens int) error {
	if q.TokensPerMinute <= 0 || promptTokens <= 0 {
		return nil
	}
	need := min(promptTokens, q.TokensPerMinute)
	if r.isDown() {
		return r.checkTokensLocal(q, now, need)
	}
	c, cancel := ctx()
	defer cancel()
	args := append(gcraArgs(tpmLimit(q), true), need)
	v, err := tokensScript.Run(c, r.c, r.tenantKeys(q.Tenant, now)[2:3], args...).Int64Slice()
	if err != nil || len(v) != 2 {
		if err != nil {
			r.failed(err)
		}
		return r.checkTokensLocal(q, now, need)
	}
	if v[0] == 0 {
		wait := time.Duration(float64(int64(need)-v[1]) / float64(q.TokensPerMinute) * float64(time.Minute))
		return &LimitError{Reason: "tokens", RetryAfter: max(wait, time.Millisecond)}
	}
	return nil
}

// checkTokensLocal is CheckTokens against this process's share of the limit.
func (r *RedisShared) checkTokensLocal(q *Quota, now time.Time, need int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ls := r.local[q.Tenant]; ls != nil && ls.tpm != nil && ls.tpm.TokensAt(now) < float64(min(need, ls.tpm.Burst())) {
		return &LimitError{Reason: "tokens", RetryAfter: time.Second}
	}
	return nil
}
