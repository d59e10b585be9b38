-- Walks a response's previous_response_id chain in one call, newest first, bounded
-- in depth and bytes. KEYS[1] the response's record; ARGV: 1 the tenant's record key
-- prefix (base.."id:"), 2 now (Unix ms), 3 max depth, 4 max bytes of items' JSON.
-- Every record is the tenant's (the prefix holds it), in KEYS[1]'s slot. Returns
--   {1, in_1, out_1, in_2, out_2, …}  the encoded items of each response, newest first
--   {0}                               the response is missing or expired
--   {-1, id}                          id, earlier in the chain, is missing or expired
--   {-2} / {-3}                       over the depth / the bytes
local now, maxd, maxb = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {1}
local key, id, depth, total = KEYS[1], nil, 0, 0
while true do
  local f = redis.call('HMGET', key, 'e', 'p', 'i', 'o', 'cb')
  if not f[1] or tonumber(f[1]) <= now then
    if id then
      return {-1, id}
    end
    return {0}
  end
  if depth == maxd then
    return {-2}
  end
  depth = depth + 1
  total = total + tonumber(f[5])
  if total > maxb then
    return {-3}
  end
  out[#out + 1] = f[3]
  out[#out + 1] = f[4]
  if not f[2] or f[2] == '' then
    return out
  end
  id = f[2]
  key = ARGV[1] .. id
end
