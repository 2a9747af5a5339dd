-- KEYS: 1 the operations catalog.
-- ARGV: the TTL in ms, then (name, entry) pairs. Each value becomes "<publish ms> <entry>".
-- Drops entries older than the TTL. Applied twice, it gives the same catalog (with a later time).
-- Returns how many entries it wrote.

local now = clock()
local ttl = tonumber(ARGV[1])
local held = redis.call('HGETALL', KEYS[1])
for i = 1, #held, 2 do
  local at = tonumber(string.match(held[i + 1], '^(%d+) '))
  if at == nil or at < now - ttl then
    redis.call('HDEL', KEYS[1], held[i])
  end
end
local stamp = ms(now) .. ' '
for i = 2, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], stamp .. ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[1], ttl)
return (#ARGV - 1) / 2
