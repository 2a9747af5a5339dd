-- KEYS: 1 the schedule (hash), then on a single Redis 2 the due set and 3 the entries tickers took (`lib/due.lua`).
-- ARGV: paused ('1' or '0'), next run ms ('' leaves it), max ttl ms, the schedule's due-set member ('' without keys
--       2 and 3).
-- Pauses or resumes an existing schedule. Returns its next run (ms), or false if there is no such schedule. Applied
-- twice it gives the same outcome. A new next run moves the due entry in the same call where the due set is among
-- its keys (elsewhere the caller moves it after).
-- Uses: due

local held = redis.call('HGET', KEYS[1], 'next')
if not held then return false end
redis.call('HSET', KEYS[1], 'paused', ARGV[1], 'updated', ms(clock()))
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'next', ARGV[2])
  held = ARGV[2]
  if ARGV[4] ~= '' then due_at(2, 3, ARGV[4], held, false, ARGV[3]) end
end
redis.call('PEXPIREAT', KEYS[1], tonumber(held) + tonumber(ARGV[3]))
return held
