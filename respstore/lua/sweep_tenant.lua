-- KEYS[1] the tenant's usage hash (naming the tenant's slot); ARGV: base, now (Unix
-- ms), max. Removes up to max of the tenant's expired responses (sweep) and returns
-- how many.
return sweep(ARGV[1], ARGV[2], tonumber(ARGV[3]))
