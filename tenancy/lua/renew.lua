-- renew.lua: push the expiry of a tenant's live tickets (renewScript, redis.go).
-- KEYS: z; ARGV: ttlms id...
local exp = tostring(now_ms() + tonumber(ARGV[1]))
local za = {'XX'}
for i = 2, #ARGV do za[#za+1] = exp za[#za+1] = ARGV[i] end
if #za > 1 then redis.call('ZADD', KEYS[1], unpack(za)) end
return 0
