-- KEYS: 1 the schedule (hash), 2 the owner's schedules (sorted set).
-- ARGV: name, body (the canonical JSON of its definition), replace ('1': a different body replaces it), max ttl ms,
--       the most schedules the owner may have (0: no limit), then the hash's field pairs (`next` among them).
-- Defines a schedule unless one of that name exists: the same body answers 'same', another 'conflict' (or, with
-- replace, is replaced: a new generation, its ticks afresh); a new name when the owner has the most it may answers
-- 'limit'. Returns {outcome, next run ms}. Applied twice it answers 'same' the second time and changes nothing.

local held = redis.call('HMGET', KEYS[1], 'body', 'next')
if held[1] then
  if held[1] == ARGV[2] then return {'same', held[2]} end
  if ARGV[3] ~= '1' then return {'conflict', held[2]} end
  redis.call('DEL', KEYS[1])
elseif tonumber(ARGV[5]) > 0 and not redis.call('ZSCORE', KEYS[2], ARGV[1])
    and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then
  return {'limit', ''}
end
local now = ms(clock())
redis.call('HSET', KEYS[1], 'body', ARGV[2], 'created', now, 'updated', now, unpack(ARGV, 6))
local next_ms = redis.call('HGET', KEYS[1], 'next')
redis.call('PEXPIREAT', KEYS[1], tonumber(next_ms) + tonumber(ARGV[4]))
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return {held[1] and 'replaced' or 'created', next_ms}
