-- KEYS: 1 the schedule (hash), 2 the jobs it made (sorted set: job id -> tick ms).
-- ARGV: generation seen, pending ticks seen, max ttl ms, request id, then (job id, tick ms) pairs, oldest tick first
--       (none or fewer than the ticks: a tick whose job could never be made is let go).
-- Indexes the jobs made for the pending ticks and, if the ticks are still the pending ones, clears them and records
-- the last run. Returns the next run (ms) or 'changed'. Applied twice it answers as the first time (the request id
-- is kept in `rq`) and changes nothing more.

if #ARGV >= 6 then
  local args = {}
  for i = 5, #ARGV, 2 do
    table.insert(args, ARGV[i + 1])
    table.insert(args, ARGV[i])
  end
  redis.call('ZADD', KEYS[2], unpack(args))
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
local s = redis.call('HMGET', KEYS[1], 'gen', 'pending', 'next', 'rq')
local again = replayed(s[4], ARGV[4])
if again then return again end
if s[1] ~= ARGV[1] or s[2] ~= ARGV[2] or ARGV[2] == '' then return 'changed' end
local now = ms(clock())
if #ARGV >= 6 then
  redis.call('HSET', KEYS[1], 'pending', '', 'last', ARGV[#ARGV], 'lastjob', ARGV[#ARGV - 1], 'updated', now,
    'rq', ARGV[4] .. ' ' .. s[3])
else  -- every pending tick was let go (its job could never be made): the last run stays what it was
  redis.call('HSET', KEYS[1], 'pending', '', 'updated', now, 'rq', ARGV[4] .. ' ' .. s[3])
end
return s[3]
