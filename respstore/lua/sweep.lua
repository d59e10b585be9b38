-- sweep(base, now, max): removes up to max of one tenant's responses expired at now
-- (Unix ms), with everything that counts them, and returns how many it removed.
-- base is the tenant's key prefix (P resp:{T}:); its keys are base.."exp" (zset: id
-- → expires), base.."size" (hash: id → Record.Size), base.."usage" (hash: n, b) and
-- base.."id:"..id (the record). Every key is the tenant's, in one hash slot.
local function sweep(base, now, max)
  local exp, size, usage = base .. 'exp', base .. 'size', base .. 'usage'
  local dead = redis.call('ZRANGEBYSCORE', exp, '-inf', now, 'LIMIT', 0, max)
  for _, id in ipairs(dead) do
    local sz = tonumber(redis.call('HGET', size, id) or '0')
    redis.call('DEL', base .. 'id:' .. id)
    redis.call('HDEL', size, id)
    redis.call('ZREM', exp, id)
    redis.call('HINCRBY', usage, 'n', -1)
    redis.call('HINCRBY', usage, 'b', -sz)
  end
  return #dead
end
