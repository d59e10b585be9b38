-- lib_gcra.lua: GCRA on a key read by the script, after lib_gcra_at.lua (luaGCRA, redis.go).
local function gcra_result(d) return {d.allowed, d.remaining, tostring(d.retry), tostring(d.reset)} end
local function gcra_apply(d) if d and d.ex > 0 then redis.call('SET', d.key, d.tat, 'EX', d.ex) end end
local function gcra_allow_n(key, burst, rate, period, cost, now)
  return gcra_allow_n_at(redis.call('GET', key), key, burst, rate, period, cost, now)
end
local function gcra_allow_at_most(key, burst, rate, period, cost, now)
  return gcra_allow_at_most_at(redis.call('GET', key), key, burst, rate, period, cost, now)
end
