-- admit_job.lua: add a tenant's job unless max unfinished ones are there
-- (admitJobScript, redisapi.go). KEYS: jobs; ARGV: id max ttlms. Answers 1 (added) or 0.
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local max = tonumber(ARGV[2])
if max > 0 and not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= max then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
return 1
