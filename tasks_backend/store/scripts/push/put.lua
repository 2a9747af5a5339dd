-- KEYS: 1 the job's push configs, 2 their cursors.
-- ARGV: config id, stored subscription, cursor, expiry (ms), limit.
-- The limit is checked in the write itself: a count read before a separate write lets concurrent puts
-- all see room and all store. Replacing an id already stored never counts against it. Returns 0 when
-- full (nothing written), else 1. Applied twice, the second run finds the id stored and writes the same
-- values again.

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[5]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('PEXPIREAT', KEYS[1], ARGV[4])
redis.call('PEXPIREAT', KEYS[2], ARGV[4])
return 1
