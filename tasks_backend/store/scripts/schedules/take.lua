-- KEYS: 1 the due set (sorted set: schedule member -> next run ms).
-- ARGV: limit, lease ms, the due set's ttl ms.
-- Takes up to `limit` due schedules for one ticker: each is moved `lease` ms ahead, so that another ticker leaves it
-- alone unless this one dies. Returns {now, the earliest entry left (ms, or '' if none), member, member, ...}.
-- Applied twice it takes what is due then (the second time, nothing already taken).
-- The ticker's passes keep the due set alive: only a definition or a resume sets its TTL otherwise, and schedules
-- that tick for longer than the TTL without either would stop. Renewed once half of it is gone (no write per pass).

local now = clock()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[1])
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], ms(now + tonumber(ARGV[2])), member)
end
local ttl = tonumber(ARGV[3])
local left = redis.call('PTTL', KEYS[1])
if left == -1 or (left >= 0 and left < ttl / 2) then redis.call('PEXPIRE', KEYS[1], ttl) end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
table.insert(due, 1, first[2] or '')
table.insert(due, 1, ms(now))
return due
