-- KEYS: 1 an owner's webhook secret (hash: current, previous, previousUntil).
-- ARGV: a fresh secret, grace (ms), TTL (ms), mode ("ensure" or "rotate").
-- "ensure" keeps the current secret, storing the fresh one only when there is none. "rotate" makes the fresh
-- one current and keeps the one it replaces, as `previous`, until Redis's clock passes now + grace (a
-- grace of 0 drops it). Applied twice, the second run finds the fresh secret current and changes nothing.
-- A previous secret whose grace has ended is dropped. Either way the key lives at least TTL more.
-- Returns {current, previous or '', previousUntil or ''}.

local key, fresh, grace, ttl, mode = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local current = redis.call('HGET', key, 'current')
if not current then
  redis.call('HSET', key, 'current', fresh)
  current = fresh
elseif mode == 'rotate' and current ~= fresh then
  redis.call('HDEL', key, 'previous', 'previousUntil')
  if grace > 0 then
    redis.call('HSET', key, 'previous', current, 'previousUntil', ms(clock() + grace))
  end
  redis.call('HSET', key, 'current', fresh)
  current = fresh
end
local ends = tonumber(redis.call('HGET', key, 'previousUntil') or '')
if ends and ends <= clock() then redis.call('HDEL', key, 'previous', 'previousUntil') end
if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
local previous = redis.call('HGET', key, 'previous') or ''
local until_ms = redis.call('HGET', key, 'previousUntil') or ''
return {current, previous, until_ms}
