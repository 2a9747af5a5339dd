-- KEYS: job, feed, steps, answers.
-- ARGV: request id, token of the run that parked ('' = any), status message.
-- Returns {outcome, when}: queued | early (a sleeper whose time has not come: `when` is that time, Redis ms) |
-- idle (not suspended, or suspended since another run parked it) | missing.
-- The one move of a suspended job (a sleep's time came, or its children finished) back to `queued`: see
-- `running.waking`. The caller puts the job on the sweep schedule in the same round trip, before this script,
-- so a job it queues always has an entry. Waking early is harmless (the job replays and waits again), so a
-- parent's children are checked by the caller, not here (they live in other slots).
-- Uses: job

local h = redis.call('HMGET', KEYS[1], 'state', 'token', 'wake', 'rq')
if not h[1] then return {'missing', 0} end
local again = replayed(h[4], ARGV[1])
if again then return cjson.decode(again) end
if h[1] ~= $SUSPENDED or (ARGV[2] ~= '' and h[2] ~= ARGV[2]) then return {'idle', 0} end
local now = clock()
if h[3] and tonumber(h[3]) > now then return {'early', h[3]} end
local reply = {$QUEUED, 0}
redis.call('HSET', KEYS[1], 'state', $QUEUED, 'updated', ms(now), 'msg', ARGV[3],
           'rq', ARGV[1] .. ' ' .. cjson.encode(reply))
redis.call('HDEL', KEYS[1], 'wake', 'kids')
emit(ms(now), false)
return reply
