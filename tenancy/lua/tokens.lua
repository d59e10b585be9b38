-- tokens.lua: whether need tokens are left of a tenant's tokens/min, taking nothing
-- (tokensScript, redistokens.go). KEYS: s; ARGV: burst rate period need
local d = gcra_allow_n_at(redis.call('HGET', KEYS[1], '=tpm'), nil, tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), 0, gcra_now(redis.call('TIME')))
if d.remaining < tonumber(ARGV[4]) then return {0, math.floor(d.remaining)} end
return {1, math.floor(d.remaining)}
