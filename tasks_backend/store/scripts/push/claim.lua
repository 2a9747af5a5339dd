-- KEYS: 1 a job's push lock.
-- ARGV: token, ttl ms.
-- Take the lock if it is free or already ours (a replay whose first reply was lost must not lock its own caller
-- out). Returns 1 when held by `token`.

local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
