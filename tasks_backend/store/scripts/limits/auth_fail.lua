-- KEYS: 1 failure hash of one client address (c: count, e: end of the window in ms, n: last nonce).
-- ARGV: window (ms), nonce.
-- Returns {failures in this window, ms left of it}. Applied twice with one nonce it counts once.

local now = clock()
local ends = tonumber(redis.call('HGET', KEYS[1], 'e'))
if not ends or ends <= now then
  redis.call('DEL', KEYS[1])
  ends = now + tonumber(ARGV[1])
  redis.call('HSET', KEYS[1], 'e', ends)
  redis.call('PEXPIREAT', KEYS[1], ends)
end
if redis.call('HGET', KEYS[1], 'n') ~= ARGV[2] then
  redis.call('HINCRBY', KEYS[1], 'c', 1)
  redis.call('HSET', KEYS[1], 'n', ARGV[2])
end
return {tonumber(redis.call('HGET', KEYS[1], 'c')), ends - now}
