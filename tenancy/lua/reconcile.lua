-- reconcile.lua: close a lease whose holder is gone (leaseredis.go).
--
-- Guarantees: each window's spend is raised to what the holder's ledger says it
-- settled from the lease, never lowered (money reported but not in the ledger stays
-- charged: never overspent), and only by what was not reported before; then the
-- lease's money and slots are given back to the tenant (=held, =n) and the lease is
-- marked closed. Running it again charges and returns nothing more.
--
-- KEYS: s lease, then spentD spentM of each window pair
-- ARGV: nW, then per pair: ledgerDay dayName ledgerMonth monthName expD expM
--       (a day's and a month's ledger sums from the lease: each window appears once
--       with its sum; a pair whose sum is repeated passes -1 to skip it)
-- Answers {money returned, slots returned, money charged}.
local nW = tonumber(ARGV[1])
local lk = KEYS[2]
if redis.call('HGET', lk, 'closed') then return {0, 0, 0} end
local charged = 0
for i = 1, nW do
  local o = 1 + (i-1)*6
  local ld, dn, lm, mn = tonumber(ARGV[o+1]), ARGV[o+2], tonumber(ARGV[o+3]), ARGV[o+4]
  if ld >= 0 then
    local diff = ld - num(redis.call('HGET', lk, 'd:' .. dn))
    if diff > 0 then
      if redis.call('INCRBY', KEYS[1+2*i], diff) == diff then redis.call('EXPIREAT', KEYS[1+2*i], ARGV[o+5]) end
      redis.call('HINCRBY', lk, 'd:' .. dn, diff)
      charged = charged + diff
    end
  end
  if lm >= 0 then
    local diff = lm - num(redis.call('HGET', lk, 'm:' .. mn))
    if diff > 0 then
      if redis.call('INCRBY', KEYS[2+2*i], diff) == diff then redis.call('EXPIREAT', KEYS[2+2*i], ARGV[o+6]) end
      redis.call('HINCRBY', lk, 'm:' .. mn, diff)
    end
  end
end
local lv = redis.call('HMGET', lk, 'money', 'slots')
local mine, slots = num(lv[1]), num(lv[2])
if mine ~= 0 then redis.call('HINCRBY', KEYS[1], '=held', istr(-mine)) end
if slots ~= 0 then redis.call('HINCRBY', KEYS[1], '=n', istr(-slots)) end
redis.call('HSET', lk, 'money', 0, 'slots', 0, 'closed', 1)
return {mine, slots, charged}
