-- reap.lua: give back the money and slots of a tenant's expired tickets
-- (reapScript, redis.go). KEYS: s z
reap(KEYS[1], KEYS[2], now_ms())
return 0
