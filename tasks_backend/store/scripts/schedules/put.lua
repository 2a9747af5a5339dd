-- KEYS: 1 the schedule (hash), 2 the owner's schedules (sorted set), 3 the owner's schedules declared in code (set),
--       then on a single Redis 4 the due set and 5 the entries tickers took (`lib/due.lua`).
-- ARGV: name, body (the canonical JSON of its definition), replace ('1': a different body replaces it), max ttl ms,
--       the most schedules the owner may have (0: no limit), request id, declared ('1': declared in code, which
--       does not count against that most), the schedule's due-set member ('' without keys 4 and 5), then the
--       hash's field pairs (`next` among them).
-- Defines a schedule unless one of that name exists: the same body answers 'same', another 'conflict' (or, with
-- replace, is replaced: a new generation, its ticks afresh); a new name when the owner has the most it may answers
-- 'limit'. Returns {outcome, next run ms}. Applied twice it answers as it did the first time (the request id is
-- kept in `rq`) and changes nothing more. With the due set among its keys the schedule's due entry is written in the
-- same call (a Redis Cluster has it in another slot: the caller writes it after, see `store.schedules`).
-- Uses: due

-- The owner's schedules that count against the most it may have: the declared ones do not.
local function counted()
  local n = redis.call('ZCARD', KEYS[2])
  for _, name in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    if redis.call('ZSCORE', KEYS[2], name) then n = n - 1 end
  end
  return n
end

-- Declared in code: in the set of those before anything else, so a schedule a process declares again at every
-- start (answered 'same'), one declared before the set existed included, is never counted.
local function mark_declared(t)
  redis.call('SADD', KEYS[3], ARGV[1])
  outlive(3, clock(t) + tonumber(ARGV[4]), t)
end

local t = redis.call('TIME')
local held = redis.call('HMGET', KEYS[1], 'body', 'next', 'rq')
if ARGV[7] == '1' then mark_declared(t) end
if held[1] then
  local again = replayed(held[3], ARGV[6])
  if again then return {again, held[2]} end
  if held[1] == ARGV[2] then
    if ARGV[8] ~= '' then due_at(4, 5, ARGV[8], held[2], true, ARGV[4]) end
    if ARGV[7] == '1' then outlive(3, tonumber(held[2]) + tonumber(ARGV[4]), t) end
    return {'same', held[2]}
  end
  if ARGV[3] ~= '1' then return {'conflict', held[2]} end
  redis.call('DEL', KEYS[1])
elseif tonumber(ARGV[5]) > 0 and not redis.call('ZSCORE', KEYS[2], ARGV[1]) and counted() >= tonumber(ARGV[5]) then
  return {'limit', ''}
end
local now = ms(clock(t))
local outcome = held[1] and 'replaced' or 'created'
redis.call('HSET', KEYS[1], 'body', ARGV[2], 'created', now, 'updated', now, 'rq', ARGV[6] .. ' ' .. outcome,
  unpack(ARGV, 9))
local next_ms = redis.call('HGET', KEYS[1], 'next')
local ends = tonumber(next_ms) + tonumber(ARGV[4])
redis.call('PEXPIREAT', KEYS[1], ends)
redis.call('ZADD', KEYS[2], now, ARGV[1])
outlive(2, ends, t)
if ARGV[7] == '1' then outlive(3, ends, t) else redis.call('SREM', KEYS[3], ARGV[1]) end
if ARGV[8] ~= '' then due_at(4, 5, ARGV[8], next_ms, false, ARGV[4]) end
return {outcome, next_ms}
