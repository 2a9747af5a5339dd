-- KEYS: 1 the schedule (hash).
-- ARGV: paused ('1' or '0'), next run ms ('' leaves it), max ttl ms.
-- Pauses or resumes an existing schedule. Returns its next run (ms), or false if there is no such schedule. Applied
-- twice it gives the same outcome.

local held = redis.call('HGET', KEYS[1], 'next')
if not held then return false end
redis.call('HSET', KEYS[1], 'paused', ARGV[1], 'updated', ms(clock()))
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'next', ARGV[2])
  held = ARGV[2]
end
redis.call('PEXPIREAT', KEYS[1], tonumber(held) + tonumber(ARGV[3]))
return held
