-- lib_reap.lua: reap, the reaper of a tenant's expired tickets (luaReap, redis.go).
-- reap gives back the money and slots of the tenant's expired tickets (hash s, sorted set z).
local function reap(s, z, now)
  repeat
    local dead = redis.call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, 256)
    if #dead == 0 then return end
    local vs = redis.call('HMGET', s, unpack(dead))
    local a, n = 0, 0
    for i = 1, #dead do local v = num(vs[i]) a, n = a + math.floor(v / 2), n + v % 2 end
    if a ~= 0 then redis.call('HINCRBY', s, '=held', istr(-a)) end
    if n ~= 0 then redis.call('HINCRBY', s, '=n', istr(-n)) end
    redis.call('HDEL', s, unpack(dead))
    redis.call('ZREM', z, unpack(dead))
  until #dead < 256
end
