-- KEYS: job, feed, steps, answers.
-- ARGV: token, lease ms.
-- Returns 1 if the run was cancelled, 0 carry on, -1 lost. Applied twice, the lease ends up the same.
-- Uses: job

local h = redis.call('HMGET', KEYS[1], 'state', 'token', 'ctok')
local s = standing(h[1], h[2], h[3], ARGV[1])
if s == $CANCELLED then return 1 end
if s ~= 'ok' then return -1 end
redis.call('HSET', KEYS[1], 'lease', ms(clock() + tonumber(ARGV[2])))
return 0
