-- KEYS: 1 the schedule (hash), 2 the jobs it made (sorted set: job id -> tick ms).
-- ARGV: generation seen, pending ticks seen, max ttl ms, then (job id, tick ms) pairs, oldest tick first (none or
--       fewer than the ticks: a tick whose job could never be made is let go).
-- Indexes the jobs made for the pending ticks and, if the ticks are still the pending ones, clears them and records
-- the last run. Returns the next run (ms) or 'changed'. Applied twice it answers 'changed' and changes nothing more.

if #ARGV >= 5 then
  local args = {}
  for i = 4, #ARGV, 2 do
    table.insert(args, ARGV[i + 1])
    table.insert(args, ARGV[i])
  end
  redis.call('ZADD', KEYS[2], unpack(args))
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
local s = redis.call('HMGET', KEYS[1], 'gen', 'pending', 'next')
if s[1] ~= ARGV[1] or s[2] ~= ARGV[2] or ARGV[2] == '' then return 'changed' end
if #ARGV >= 5 then
  redis.call('HSET', KEYS[1], 'pending', '', 'last', ARGV[#ARGV], 'lastjob', ARGV[#ARGV - 1], 'updated', ms(clock()))
else  -- every pending tick was let go (its job could never be made): the last run stays what it was
  redis.call('HSET', KEYS[1], 'pending', '', 'updated', ms(clock()))
end
return s[3]
