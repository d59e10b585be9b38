-- renew_jobs.lua: push the expiry of a process's unfinished jobs
-- (renewJobsScript, redisapi.go). KEYS: jobs; ARGV: ttlms id...
local exp = tostring(now_ms() + tonumber(ARGV[1]))
local za = {}
for i = 2, #ARGV do za[#za+1] = exp za[#za+1] = ARGV[i] end
if #za > 0 then redis.call('ZADD', KEYS[1], unpack(za)) end
return 0
