-- KEYS: 1 the due set (sorted set: schedule member -> next run ms).
-- ARGV: limit, lease ms.
-- Takes up to `limit` due schedules for one ticker: each is moved `lease` ms ahead, so that another ticker leaves it
-- alone unless this one dies. Returns {now, the earliest entry left (ms, or '' if none), member, member, ...}.
-- Applied twice it takes what is due then (the second time, nothing already taken).

local now = clock()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[1])
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], ms(now + tonumber(ARGV[2])), member)
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
table.insert(due, 1, first[2] or '')
table.insert(due, 1, ms(now))
return due
