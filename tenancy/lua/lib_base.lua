-- lib_base.lua: the helpers every script uses (luaBase, redis.go).
local function now_ms() local t = redis.call('TIME') return tonumber(t[1])*1000 + math.floor(tonumber(t[2])/1000) end
local function num(v) if v then return tonumber(v) end return 0 end
local function istr(x) return string.format('%d', x) end
local function room(spent, ceil, held)
  if ceil == 0 then return -1 end
  local r = ceil - spent - held
  if r < 0 then return 0 end
  return r
end
