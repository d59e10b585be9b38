-- lib_gcra_at.lua: the GCRA steps on a state passed in (luaGCRAAt, redis.go).
local function gcra_now(t) return (t[1] - 1483228800) + (t[2] / 1000000) end
-- allowN: take cost at once, or nothing.
-- The _at forms take the key's stored value (false: none) instead of reading it, so
-- that a script deciding several requests reads the state once.
local function gcra_allow_n_at(tat, key, burst, rate, period, cost, now)
  local interval = period / rate
  if tat then tat = tonumber(tat) else tat = now end
  tat = math.max(tat, now)
  local after = tat + interval * cost
  local diff = now - (after - interval * burst)
  if diff / interval < 0 then
    return {allowed = 0, remaining = 0, retry = -diff, reset = tat - now, ex = 0}
  end
  local reset = after - now
  local d = {allowed = cost, remaining = diff / interval, retry = -1, reset = reset, key = key, tat = after, ex = 0}
  if reset > 0 then d.ex = math.ceil(reset) end
  return d
end
-- allowAtMost: take up to cost, as much as there is (at least 1).
local function gcra_allow_at_most_at(tat, key, burst, rate, period, cost, now)
  local interval = period / rate
  if tat then tat = tonumber(tat) else tat = now end
  tat = math.max(tat, now)
  local diff = now - (tat - interval * burst)
  local left = diff / interval
  if left < 1 then
    return {allowed = 0, remaining = 0, retry = interval - diff, reset = tat - now, ex = 0}
  end
  if left < cost then cost, left = left, 0 else left = left - cost end
  local after = tat + interval * cost
  local reset = after - now
  local d = {allowed = cost, remaining = left, retry = -1, reset = reset, key = key, tat = after, ex = 0}
  if reset > 0 then d.ex = math.ceil(reset) end
  return d
end
