-- release.lua: give back the per-request tickets an earlier run of a ledger left in
-- Redis that its ledger does not hold (ReconcileLeases, leaseredis.go): admitted on
-- the per-request path, their process died before their hold reached the ledger, so
-- nothing else would return them before they expire. Running it again returns nothing.
--
-- KEYS: s z; ARGV: prefix (the owner's ticket ids: TicketPrefix), then the ids to keep
-- (held in the ledger: SettleInterrupted charges them)
-- Answers {money returned, slots returned, tickets released}.
local prefix, keep = ARGV[1], {}
for i = 2, #ARGV do keep[ARGV[i]] = true end
local a, n, ids = 0, 0, {}
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if f:sub(1, #prefix) == prefix and not keep[f] then
    local v = num(redis.call('HGET', KEYS[1], f))
    a, n = a + math.floor(v / 2), n + v % 2
    ids[#ids + 1] = f
  end
end
if #ids == 0 then return {0, 0, 0} end
if a ~= 0 then redis.call('HINCRBY', KEYS[1], '=held', istr(-a)) end
if n ~= 0 then redis.call('HINCRBY', KEYS[1], '=n', istr(-n)) end
redis.call('HDEL', KEYS[1], unpack(ids))
redis.call('ZREM', KEYS[2], unpack(ids))
return {a, n, #ids}
