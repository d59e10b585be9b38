-- flush.lua: one flush's settlements and admissions of one tenant as one script
-- (flushScript, redisbatch.go, which documents KEYS, ARGV and the answers).
local t = redis.call('TIME')
local now = tonumber(t[1])*1000 + math.floor(tonumber(t[2])/1000)
local nA, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local cd, cm, max = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local rpsB, rpsR, rpsP = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local tpmB, tpmR, tpmP = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local nS = tonumber(ARGV[12])
local sb = 14 + nA*3 -- settlement i's arguments are ARGV[sb + 5i - 4 ..], its keys KEYS[3 + 2i], KEYS[4 + 2i]
local ids, sids, all = {}, {}, {}
for i = 1, nS do sids[i] = ARGV[sb + i*5 - 4] all[#all+1] = sids[i] end
for i = 1, nA do ids[i] = ARGV[12 + i*3] all[#all+1] = ids[i] end
-- The state, read once: the spend and the settlements' done keys (one MGET), the
-- tenant's hash (held money, slots, GCRA states, the flush's tickets: one HMGET).
local mk = {KEYS[1], KEYS[2]}
for i = 1, nS do mk[i+2] = KEYS[3+2*i] end
local sv = redis.call('MGET', unpack(mk))
local sd, sm = num(sv[1]), num(sv[2])
local hv = redis.call('HMGET', KEYS[3], '=held', '=n', '=rps', '=tpm', unpack(all))
local held0, n0, rpsv, tpmv = num(hv[1]), num(hv[2]), hv[3], hv[4]
-- tk: ticket id -> its field's value, 2 x the money reserved + 1 if it holds a slot
-- (0: no field, not in the sorted set); order: the tickets changed, in order.
local tk, order, inorder, renew = {}, {}, {}, {}
for i = 1, #all do if tk[all[i]] == nil then tk[all[i]] = num(hv[4+i]) end end
local function set(id, v)
  if not inorder[id] then inorder[id] = true order[#order+1] = id end
  tk[id] = v
end
local held, nslots, gdirty = held0, n0, false
local gnow = gcra_now(t)
local out = {}
-- The settlements, in order: a ticket settled before (its done key exists: a retry)
-- charges nothing more and answers what it charged (and whether another settlement of
-- a batch line charged it); otherwise its reservation is replaced by its actual cost,
-- its slot freed, the tokens used charged to tokens/min (allowAtMost), and its done key
-- (and a batch line's by key) written.
if nS > 0 then
  local done, by, add, sets = {}, {}, 0, {}
  for i = 1, nS do local k = KEYS[3+2*i] if sv[2+i] and done[k] == nil then done[k] = sv[2+i] end end
  for i = 1, nS do
    local o = sb + i*5 - 4
    local id, a, tokens, keep = sids[i], tonumber(ARGV[o+1]), tonumber(ARGV[o+2]), tonumber(ARGV[o+3])
    local line = keep > 3600
    local v = tk[id]
    local c = math.floor(v / 2)
    if v ~= 0 then
      held, nslots = held - c, nslots - v % 2
      set(id, 0)
    end
    local dk, bk = KEYS[3+2*i], KEYS[4+2*i]
    local prev = done[dk]
    if prev then
      -- Settled before (a retried command, or a batch line run again after its worker
      -- died): charge nothing more, give back what a new reservation under id holds.
      -- Another run's settlement if a batch line's by key holds another token.
      local again = 0
      if line then
        if by[bk] == nil then by[bk] = redis.call('GET', bk) end
        if by[bk] ~= ARGV[o+4] then again = 1 end
      end
      out[nA*4 + i*2 - 1], out[nA*4 + i*2] = tonumber(prev), again
    else
      if a > 0 then add = add + a end
      if tokens > 0 and tpmR > 0 then
        local d = gcra_allow_at_most_at(tpmv, nil, tpmB, tpmR, tpmP, tokens, gnow)
        if d.ex > 0 then tpmv, gdirty = d.tat, true end
      end
      -- A batch line's settlement (kept longer) is remembered only when it charged: a
      -- line refused or failed at no cost runs again later under the same id and must
      -- be charged then.
      if a > 0 or (not line and (c ~= 0 or tokens > 0)) then
        done[dk] = a
        if line then by[bk] = ARGV[o+4] end
        sets[#sets+1] = i
      end
      out[nA*4 + i*2 - 1], out[nA*4 + i*2] = a, 0
    end
  end
  if add > 0 then
    -- A window's key gets its expiry when the first settlement creates it.
    if redis.call('INCRBY', KEYS[1], add) == add then redis.call('EXPIREAT', KEYS[1], ARGV[13]) end
    if redis.call('INCRBY', KEYS[2], add) == add then redis.call('EXPIREAT', KEYS[2], ARGV[14]) end
    sd, sm = sd + add, sm + add
  end
  for _, i in ipairs(sets) do
    local o = sb + i*5 - 4
    redis.call('SET', KEYS[3+2*i], ARGV[o+1], 'EX', ARGV[o+3])
    if tonumber(ARGV[o+3]) > 3600 then redis.call('SET', KEYS[4+2*i], ARGV[o+4], 'EX', ARGV[o+3]) end
  end
end
-- The admissions, in order, each all or nothing: the tenant's expired tickets reaped
-- first (their money and slots back), then for each a concurrency slot, tokens/min
-- (the prompt's tokens must be left, none taken), requests/s (one taken), and the
-- reservation of its worst case against the day's and month's budgets. An admitted
-- ticket is leased until now + ttl.
if nA > 0 then
  local off = 0
  repeat
    local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', off, 256)
    local need = {}
    for _, id in ipairs(dead) do if tk[id] == nil then need[#need+1] = id end end
    if #need > 0 then
      local vs = redis.call('HMGET', KEYS[3], unpack(need))
      for i = 1, #need do tk[need[i]] = num(vs[i]) end
    end
    for _, id in ipairs(dead) do
      local v = tk[id]
      held, nslots = held - math.floor(v / 2), nslots - v % 2
      set(id, 0)
    end
    off = off + 256
  until #dead < 256
  for i = 1, nA do
    local o = 12 + i*3
    local id, total = ids[i], tonumber(ARGV[o+1])
    local v = tk[id]
    local slot = v % 2
    local code, r1, r2, r3 = 1, 0, 0, 0
    local tpm, rps
    if max > 0 and slot == 0 and nslots >= max then code = 0 end
    if code == 1 and tpmR > 0 then
      tpm = gcra_allow_n_at(tpmv, nil, tpmB, tpmR, tpmP, 0, gnow)
      if tpm.remaining < tonumber(ARGV[o+2]) then code, r3 = 2, math.floor(tpm.remaining) end
    end
    if code == 1 and rpsR > 0 then
      rps = gcra_allow_n_at(rpsv, nil, rpsB, rpsR, rpsP, 1, gnow)
      if rps.allowed == 0 then code, r3 = 3, tostring(rps.retry) end
    end
    local delta = 0
    if code == 1 then
      delta = total - math.floor(v / 2)
      if delta > 0 and ((cd > 0 and sd + held + delta > cd) or (cm > 0 and sm + held + delta > cm)) then
        code, r1, r2 = 4, room(sd, cd, held), room(sm, cm, held)
      end
    end
    if code == 1 then
      if tpm and tpm.ex > 0 then tpmv, gdirty = tpm.tat, true end
      if rps and rps.ex > 0 then rpsv, gdirty = rps.tat, true end
      if max > 0 and slot == 0 then nslots, slot = nslots + 1, 1 end
      held = held + delta
      set(id, total*2 + slot)
      if max > 0 or total > 0 then renew[id] = true end
      r1, r2 = room(sd, cd, held), room(sm, cm, held)
    end
    local j = i*4
    out[j-3], out[j-2], out[j-1], out[j] = code, r1, r2, r3
  end
end
-- The writes: one HSET, one HDEL, one ZADD, one ZREM at most.
local hs, hd, za = {}, {}, {}
if held ~= held0 then hs[#hs+1] = '=held' hs[#hs+1] = istr(held) end
if nslots ~= n0 then hs[#hs+1] = '=n' hs[#hs+1] = istr(nslots) end
if gdirty then
  if rpsv ~= hv[3] then hs[#hs+1] = '=rps' hs[#hs+1] = rpsv end
  if tpmv ~= hv[4] then hs[#hs+1] = '=tpm' hs[#hs+1] = tpmv end
end
local exp = tostring(now + ttl) -- converted once, not once per member
for _, id in ipairs(order) do
  local v = tk[id]
  if v > 0 then
    hs[#hs+1] = id hs[#hs+1] = istr(v)
    if renew[id] then za[#za+1] = exp za[#za+1] = id end
  else
    hd[#hd+1] = id
  end
end
if #hs > 0 then redis.call('HSET', KEYS[3], unpack(hs)) end
if #za > 0 then redis.call('ZADD', KEYS[4], unpack(za)) end
if #hd > 0 then
  redis.call('HDEL', KEYS[3], unpack(hd))
  redis.call('ZREM', KEYS[4], unpack(hd))
end
return out
