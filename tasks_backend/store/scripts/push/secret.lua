-- KEYS: 1 an owner's webhook secret (hash: current, previous, previousUntil).
-- ARGV: a fresh secret, grace (ms), TTL (ms), mode ("ensure" or "rotate").
-- "ensure" keeps the current secret, storing the fresh one only when there is none. "rotate" makes the fresh
-- one current and keeps the one it replaces, as `previous`, until Redis's clock passes now + grace (a
-- grace of 0 drops it). Applied twice, the second run finds the fresh secret current and changes nothing.
-- A previous secret whose grace has ended is dropped. Either way the key lives at least TTL more.
-- Returns {current, previous or '', previousUntil or ''}.

local fresh, grace, ttl, mode = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local current = redis.call('HGET', KEYS[1], 'current')
if not current then
  redis.call('HSET', KEYS[1], 'current', fresh)
  current = fresh
elseif mode == 'rotate' and current ~= fresh then
  redis.call('HDEL', KEYS[1], 'previous', 'previousUntil')
  if grace > 0 then
    redis.call('HSET', KEYS[1], 'previous', current, 'previousUntil', ms(clock() + grace))
  end
  redis.call('HSET', KEYS[1], 'current', fresh)
  current = fresh
end
local ends = tonumber(redis.call('HGET', KEYS[1], 'previousUntil') or '')
if ends and ends <= clock() then redis.call('HDEL', KEYS[1], 'previous', 'previousUntil') end
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
local previous = redis.call('HGET', KEYS[1], 'previous') or ''
local until_ms = redis.call('HGET', KEYS[1], 'previousUntil') or ''
return {current, previous, until_ms}
