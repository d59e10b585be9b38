-- Stores one response, atomically with its tenant's index and usage, within the
-- tenant's limits. KEYS: the record, the exp zset, the size hash, the usage hash (all
-- the tenant's, one slot). ARGV: 1 base, 2 id, 3 created (Unix ms, also the sweep's
-- now), 4 expires (Unix ms), 5 size, 6 max count, 7 max bytes (0: none), 8 sweep max,
-- 9 model, 10 previous, 11 response, 12 input items, 13 output items, 14 item bytes.
-- Returns 0 when stored, 1 over the count limit, 2 over the bytes limit (nothing
-- changed but the sweep of expired responses, which a later Sweep would have done).
sweep(ARGV[1], ARGV[3], tonumber(ARGV[8]))
local size = tonumber(ARGV[5])
local n = tonumber(redis.call('HGET', KEYS[4], 'n') or '0')
local b = tonumber(redis.call('HGET', KEYS[4], 'b') or '0')
local dn, db = 1, size
local old = redis.call('HGET', KEYS[3], ARGV[2])
if old then
  dn, db = 0, size - tonumber(old)
end
local maxn, maxb = tonumber(ARGV[6]), tonumber(ARGV[7])
if maxn > 0 and dn > 0 and n + dn > maxn then
  return 1
end
if maxb > 0 and db > 0 and b + db > maxb then
  return 2
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'c', ARGV[3], 'e', ARGV[4], 'm', ARGV[9], 'p', ARGV[10],
  'r', ARGV[11], 'i', ARGV[12], 'o', ARGV[13], 'cb', ARGV[14])
redis.call('PEXPIREAT', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], size)
redis.call('HINCRBY', KEYS[4], 'n', dn)
redis.call('HINCRBY', KEYS[4], 'b', db)
return 0
