-- KEYS: 1 a job's push lock.
-- ARGV: token.
-- Compare-and-delete. Returns 1 when this call deleted it.

if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
