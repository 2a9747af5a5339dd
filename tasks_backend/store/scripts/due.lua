-- KEYS: 1 a schedule.
-- ARGV: limit.
-- Returns {now, member, score, member, score, ...}: the members due now, oldest first.

local now = ms(clock())
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, ARGV[1])
table.insert(due, 1, now)
return due
