-- KEYS: job, feed, steps, answers.
-- ARGV: request id, owner.
-- Returns cancelled | terminal | missing.
-- Any job that may still change is cancelled at once; a running one's worker is fenced out (its token
-- moves on) and stops at its next cancellation point, recording nothing more.
-- Uses: job

local h = redis.call('HMGET', KEYS[1], 'state', 'owner', 'token', 'rq')
if not h[1] or h[2] ~= ARGV[2] then return 'missing' end
local again = replayed(h[4], ARGV[1])
if again then return again end
if not in_csv(h[1], $CANCELLABLE) then return 'terminal' end
local now = ms(clock())
local sets = {'state', $CANCELLED, 'updated', now, 'msg', 'Cancelled.', 'rq', ARGV[1] .. ' ' .. $CANCELLED}
if h[1] == $RUNNING then
  local token = h[3] or '0'
  table.insert(sets, 'ctok'); table.insert(sets, token)
  table.insert(sets, 'token'); table.insert(sets, tostring(tonumber(token) + 1))
end
redis.call('HSET', KEYS[1], unpack(sets))
redis.call('HDEL', KEYS[1], 'inreq', 'lease', 'worker')
emit(now, true)
return $CANCELLED
