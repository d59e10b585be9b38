-- lease.lua: refresh one process's lease of one tenant (leaseredis.go).
--
-- Guarantees: money is only ever added to the lease if it fits under both ceilings
-- with every other reservation and lease counted (=held), and by at most half of what
-- is left beyond `reserve` (kept for the per-request path), so one lease never takes
-- all that is left; slots only if they fit under the concurrency limit with every
-- other slot counted (=n). A report (settled money and tokens) is applied once per
-- seq: a retry of the same refresh (seq not above the lease's) resizes the lease but
-- charges nothing again and takes no request tokens. The lease key never expires
-- into the tenant's state: a dead holder's lease stays counted (stranded, never
-- overspent) until it is reconciled (reconcile.lua). Request tokens are taken from
-- the tenant's GCRA bucket only beyond half its burst, which stays for the
-- per-request path.
--
-- The tenant's expired per-request tickets are reaped first (their money and slots
-- back, as every admission script does), so that what a dead process's requests held
-- is leased again within the TTL.
--
-- KEYS: spentD spentM s lease z, then spentD spentM of each report
-- ARGV: seq ceilD ceilM maxConc rpsBurst rpsRate rpsPeriod tpmBurst tpmRate tpmPeriod
--       wantMoney wantSlots rpsTake rpsGive tokens reserve owner keepSeconds nR,
--       then per report: amount dayName monthName expD expM
-- Answers {money, slots, rps tokens taken, tpm tokens left (string), roomD, roomM}:
-- the lease after the refresh and the room left beyond every reservation and lease
-- (-1: no ceiling).
local t = redis.call('TIME')
reap(KEYS[3], KEYS[5], tonumber(t[1])*1000 + math.floor(tonumber(t[2])/1000))
local seq = tonumber(ARGV[1])
local cd, cm, maxc = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local rpsB, rpsR, rpsP = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local tpmB, tpmR, tpmP = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local wantM, wantS = tonumber(ARGV[11]), tonumber(ARGV[12])
local take, give, tokens = tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15])
local reserve, nR = tonumber(ARGV[16]), tonumber(ARGV[19])
local lk = KEYS[4]
local lv = redis.call('HMGET', lk, 'seq', 'money', 'slots')
local lseq, mine, myslots = num(lv[1]), num(lv[2]), num(lv[3])
local hv = redis.call('HMGET', KEYS[3], '=held', '=n', '=rps', '=tpm')
local held0, n0, rpsv, tpmv = num(hv[1]), num(hv[2]), hv[3], hv[4]
local held, n = held0, n0
local fresh = seq > lseq
local gnow = gcra_now(t)
local got = 0
if fresh then
  for i = 1, nR do
    local o = 19 + (i-1)*5
    local a = tonumber(ARGV[o+1])
    if a > 0 then
      local kd, km = KEYS[4+2*i], KEYS[5+2*i]
      if redis.call('INCRBY', kd, a) == a then redis.call('EXPIREAT', kd, ARGV[o+4]) end
      if redis.call('INCRBY', km, a) == a then redis.call('EXPIREAT', km, ARGV[o+5]) end
      redis.call('HINCRBY', lk, 'd:' .. ARGV[o+2], a)
      redis.call('HINCRBY', lk, 'm:' .. ARGV[o+3], a)
      mine, held = mine - a, held - a
    end
  end
  if tokens > 0 and tpmR > 0 then
    local d = gcra_allow_at_most_at(tpmv, nil, tpmB, tpmR, tpmP, tokens, gnow)
    if d.ex > 0 then tpmv = d.tat end
  end
  if rpsR > 0 and give > 0 and rpsv then
    rpsv = math.max(gnow, tonumber(rpsv) - (rpsP / rpsR) * give)
  end
  if rpsR > 0 and take > 0 then
    -- Half the burst (rounded down) stays in the bucket for the per-request path: a
    -- request that finds the lease out of tokens before its next refresh is not
    -- refused while the tenant is under its rate (the lease took the tokens ahead of
    -- use). planLease asks no more than the rest (leaseTokenCap). The whole tokens in
    -- the bucket are counted with a millionth of a token's tolerance: the GCRA state is
    -- seconds since 2017 in a double, and a full bucket's exact count must not round
    -- down to one token less.
    local keep = math.floor(rpsB / 2)
    local interval = rpsP / rpsR
    local tat = gnow
    if rpsv then tat = math.max(tonumber(rpsv), gnow) end
    local whole = math.min(take, math.floor((gnow - tat) / interval + rpsB + 1e-6) - keep)
    if whole >= 1 then got = whole rpsv = tat + interval * whole end
  end
end
if mine < 0 then held, mine = held - mine, 0 end
-- Money: shrink to what is wanted, or grow by what fits beyond `reserve`.
local sv = redis.call('MGET', KEYS[1], KEYS[2])
local sd, sm = num(sv[1]), num(sv[2])
local nm = mine
if cd == 0 and cm == 0 then
  nm = 0
elseif wantM <= mine then
  nm = wantM
else
  local avail = -1
  if cd > 0 then avail = cd - sd - held end
  if cm > 0 and (avail < 0 or cm - sm - held < avail) then avail = cm - sm - held end
  local grow = math.min(wantM - mine, math.floor((avail - reserve) / 2))
  if grow > 0 then nm = mine + grow end
end
held, mine = held - mine + nm, nm
-- Slots: the same under the concurrency limit.
local ns = myslots
if maxc == 0 then
  ns = 0
elseif wantS <= myslots then
  ns = wantS
else
  local grow = math.min(wantS - myslots, maxc - n)
  if grow > 0 then ns = myslots + grow end
end
n, myslots = n - myslots + ns, ns
local hs = {}
if held ~= held0 then hs[#hs+1] = '=held' hs[#hs+1] = istr(held) end
if n ~= n0 then hs[#hs+1] = '=n' hs[#hs+1] = istr(n) end
if rpsv and rpsv ~= hv[3] then hs[#hs+1] = '=rps' hs[#hs+1] = rpsv end
if tpmv and tpmv ~= hv[4] then hs[#hs+1] = '=tpm' hs[#hs+1] = tpmv end
if #hs > 0 then redis.call('HSET', KEYS[3], unpack(hs)) end
local ls = {'money', istr(mine), 'slots', istr(myslots), 'owner', ARGV[17]}
if fresh then ls[#ls+1] = 'seq' ls[#ls+1] = ARGV[1] end
redis.call('HSET', lk, unpack(ls))
redis.call('EXPIRE', lk, ARGV[18])
local tleft = -1
if tpmR > 0 then tleft = gcra_allow_n_at(tpmv, nil, tpmB, tpmR, tpmP, 0, gnow).remaining end
return {mine, myslots, got, tostring(tleft), room(sd, cd, held), room(sm, cm, held)}
