-- KEYS: 1 the schedule (hash), 2 the owner's schedules (sorted set), 3 the jobs it made (sorted set).
-- ARGV: name, max ttl ms.
-- Deletes the schedule; the jobs it made stay (and so does their index, until the TTL ceiling). Returns 1, or 0 if
-- there was no such schedule. Applied twice it answers 0 the second time.

local existed = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
return existed
