-- KEYS: 1 the push due set.
-- ARGV: how many.
-- Returns {now, ids}: the due jobs and Redis's own clock (ms), which every worker process shares.

local now = clock()
return {now, redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))}
