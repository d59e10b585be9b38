-- allow.lua: take 1 from a GCRA bucket (allowScript, redisapi.go).
-- KEYS: the bucket; ARGV: burst rate period. Answers {allowed, retry (seconds, a string)}.
local d = gcra_allow_n(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), 1, gcra_now(redis.call('TIME')))
gcra_apply(d)
return {d.allowed, tostring(d.retry)}
