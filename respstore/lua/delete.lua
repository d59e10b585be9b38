-- Deletes one response, atomically with its tenant's index and usage, unless it is
-- missing or expired at now. KEYS: the record, the exp zset, the size hash, the usage
-- hash. ARGV: id, now (Unix ms). Returns 1 when deleted, 0 when not found.
local e = redis.call('HGET', KEYS[1], 'e')
if not e or tonumber(e) <= tonumber(ARGV[2]) then
  return 0
end
local sz = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HINCRBY', KEYS[4], 'n', -1)
redis.call('HINCRBY', KEYS[4], 'b', -sz)
return 1
