-- KEYS: job, feed, steps, answers.
-- ARGV: token, message ('' keeps), done ('' keeps), total ('' keeps).
-- Returns like renew. Progress is a change of the job, so it moves `updated` and appends to the feed
-- (a replay appends the same figures again, which changes nothing a reader sees).
-- Uses: job

local h = redis.call('HMGET', KEYS[1], 'state', 'token', 'ctok')
local s = standing(h[1], h[2], h[3], ARGV[1])
if s == $CANCELLED then return 1 end
if s ~= 'ok' then return -1 end
local now = ms(clock())
local sets = {'updated', now}
if ARGV[2] ~= '' then table.insert(sets, 'msg'); table.insert(sets, ARGV[2]) end
if ARGV[3] ~= '' then table.insert(sets, 'done'); table.insert(sets, ARGV[3]) end
if ARGV[4] ~= '' then table.insert(sets, 'total'); table.insert(sets, ARGV[4]) end
redis.call('HSET', KEYS[1], unpack(sets))
emit(now, false)
return 0
