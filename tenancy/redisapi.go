package tenancy

import (
	_ "embed"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Batch API's per-tenant limits across processes (issue 30): the plan's
// file_uploads_per_minute and batch_creates_per_minute are GCRA buckets in Redis
// (luaGCRA, the interactive requests/s's steps), and batch_max_unfinished counts the
// tenant's jobs not yet ended in a sorted set. With P the key prefix and T the tenant:
//
//	P t:{T}:api:NAME  string: the GCRA state of the bucket NAME (redis_rate's)
//	P t:{T}:jobs      sorted set: the tenant's unfinished jobs (ids) of every live
//	                  process, scored by their expiry (ms, Redis's clock); the process
//	                  running a job renews it every TTL/3, so a process that died
//	                  stops counting within the TTL, and counts again (HoldJob) when its
//	                  jobs resume

// AllowPerMinute takes one call from tenant's bucket name of n calls a minute (n at
// once, then one every 60/n seconds), or says how long until one is free. Redis's
// clock decides; an error leaves the decision to the caller.
func (r *RedisShared) AllowPerMinute(tenant, name string, n int) (wait time.Duration, ok bool, err error) {
	if n <= 0 {
		return 0, true, nil
	}
	if r.isDown() {
		return 0, false, errDown
	}
	c, cancel := ctx()
	defer cancel()
	v, err := allowScript.Run(c, r.c, []string{r.base(tenant) + "api:" + name}, n, n, 60).Slice()
	if err != nil {
		r.failed(err)
		return 0, false, err
	}
	if v[0].(int64) > 0 {
		return 0, true, nil
	}
	s, _ := v[1].(string)
	sec, _ := strconv.ParseFloat(s, 64)
	return max(time.Duration(sec*float64(time.Second)), time.Millisecond), false, nil
}

// errDown is the answer while Redis is marked down (a command failed a moment ago).
var errDown = errors.New("tenancy: redis: down a moment ago")

// allowScript takes 1 from a GCRA bucket. KEYS: the bucket; ARGV: burst rate period.
// It answers {allowed, retry (seconds, a string)}.
var allowScript = redis.NewScript(luaLib + luaGCRA + allowLua)

//go:embed lua/allow.lua
var allowLua string

// AdmitJob adds tenant's job id to its unfinished jobs unless max (> 0) are there
// already (those of processes that stopped renewing theirs do not count); an id
// already there is admitted. This process renews it until EndJob.
func (r *RedisShared) AdmitJob(tenant, id string, max int) (bool, error) {
	if r.isDown() {
		return false, errDown
	}
	c, cancel := ctx()
	defer cancel()
	ok, err := admitJobScript.Run(c, r.c, []string{r.base(tenant) + "jobs"}, id, max, r.ttl.Milliseconds()).Int()
	if err != nil {
		r.failed(err)
		return false, err
	}
	if ok == 1 {
		r.mu.Lock()
		r.jobs[id] = tenant
		r.mu.Unlock()
	}
	return ok == 1, nil
}

// admitJobScript. KEYS: jobs; ARGV: id max ttlms. Answers 1 (added) or 0.
var admitJobScript = redis.NewScript(luaLib + admitJobLua)

//go:embed lua/admit_job.lua
var admitJobLua string

// HoldJob counts tenant's job id among its unfinished ones without a check (a job
// resumed at start, or admitted by this process's count while Redis failed); a
// failure is retried by the renewal, which adds the jobs Redis lacks.
func (r *RedisShared) HoldJob(tenant, id string) {
	r.mu.Lock()
	r.jobs[id] = tenant
	r.mu.Unlock()
	if _, err := r.AdmitJob(tenant, id, 0); err != nil {
		r.log.Warn("tenancy: redis: counting a resumed batch job", "job", id, "error", err)
	}
}

// EndJob removes tenant's job id from its unfinished jobs (it ended).
func (r *RedisShared) EndJob(tenant, id string) {
	r.mu.Lock()
	delete(r.jobs, id)
	r.mu.Unlock()
	c, cancel := ctx()
	defer cancel()
	if err := r.c.ZRem(c, r.base(tenant)+"jobs", id).Err(); err != nil {
		r.failed(err) // it expires within the TTL, no longer renewed
	}
}

// renewJobs renews this process's unfinished jobs (re-adding one Redis lost).
func (r *RedisShared) renewJobs() {
	r.mu.Lock()
	by := map[string][]any{}
	for id, tenant := range r.jobs {
		by[tenant] = append(by[tenant], id)
	}
	r.mu.Unlock()
	for tenant, ids := range by {
		c, cancel := ctx()
		err := renewJobsScript.Run(c, r.c, []string{r.base(tenant) + "jobs"}, append([]any{r.ttl.Milliseconds()}, ids...)...).Err()
		cancel()
		if err != nil {
			return
		}
	}
}

// renewJobsScript. KEYS: jobs; ARGV: ttlms id...
var renewJobsScript = redis.NewScript(luaLib + renewJobsLua)

//go:embed lua/renew_jobs.lua
var renewJobsLua string
