-- reserve.lua: set a ticket's reservation to total if it fits both budgets
-- (reserveScript, redis.go). KEYS: spentD spentM s z; ARGV: id total ceilD ceilM ttlms
local now = now_ms()
reap(KEYS[3], KEYS[4], now)
local id, total, cd, cm, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local hv = redis.call('HMGET', KEYS[3], '=held', id)
local held, v = num(hv[1]), num(hv[2])
local cur, slot = math.floor(v / 2), v % 2
local sv = redis.call('MGET', KEYS[1], KEYS[2])
local sd, sm = num(sv[1]), num(sv[2])
local delta = total - cur
if delta > 0 and ((cd > 0 and sd + held + delta > cd) or (cm > 0 and sm + held + delta > cm)) then
  return {0, room(sd, cd, held), room(sm, cm, held)}
end
if delta ~= 0 then redis.call('HINCRBY', KEYS[3], '=held', istr(delta)) end
local nv = total*2 + slot
if nv == 0 then
  if v ~= 0 then
    redis.call('HDEL', KEYS[3], id)
    redis.call('ZREM', KEYS[4], id)
  end
else
  redis.call('HSET', KEYS[3], id, istr(nv))
  if total > 0 then redis.call('ZADD', KEYS[4], now + ttl, id) end
end
held = held + delta
return {1, room(sd, cd, held), room(sm, cm, held)}
