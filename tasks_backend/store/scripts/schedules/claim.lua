-- KEYS: 1 the schedule (hash), 2 the owner's schedules (sorted set), 3 the owner's schedules declared in code (set),
--       renewed with the second: while a declared schedule ticks, its place outside the owner's count stays.
-- ARGV: generation seen, next run seen (ms), paused seen ('1' or '0'), the next run after now (ms), the ticks to make
--       jobs for ('' none, else comma-separated ms), max ttl ms, request id.
-- Moves the schedule on, if it is still as the ticker read it (same generation, next run and pause, nothing
-- pending): the ticks become `pending` until their jobs are made (see finish.lua). Returns 'ok' or 'changed';
-- applied twice, the second answers as the first (the request id is kept in `rq`) and changes nothing.
-- Uses: due

local s = redis.call('HMGET', KEYS[1], 'gen', 'next', 'paused', 'pending', 'rq')
local again = replayed(s[5], ARGV[7])
if again then return again end
if s[1] ~= ARGV[1] or s[2] ~= ARGV[2] or (s[3] or '0') ~= ARGV[3] or (s[4] and s[4] ~= '') then
  return 'changed'
end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'next', ARGV[4], 'pending', ARGV[5], 'updated', ms(clock(t)),
  'rq', ARGV[7] .. ' ok')
local ends = tonumber(ARGV[4]) + tonumber(ARGV[6])
redis.call('PEXPIREAT', KEYS[1], ends)
outlive(2, ends, t)
outlive(3, ends, t)  -- none when the owner declared nothing: then it does nothing
return 'ok'
