-- KEYS: job, feed, steps, answers.
-- ARGV: request id, owner, who answers (a principal, `link:<id>` or `timeout`), from which address, then key/JSON
-- answer pairs. Unknown and already answered keys are ignored; each answer recorded notes who, when and from where
-- in `ansby`.
-- Returns {outcome, open count}: queued | waiting | conflict | missing. The caller puts the job on the
-- sweep schedule in the same round trip, before this script, so a job it queues always has an entry.
-- Uses: job

local h = redis.call('HMGET', KEYS[1], 'state', 'owner', 'inreq', 'rq')
if not h[1] or h[2] ~= ARGV[2] then return {'missing', 0} end
local again = replayed(h[4], ARGV[1])
if again then return cjson.decode(again) end
if h[1] ~= $INPUT_REQUIRED then return {'conflict', 0} end
local requests = cjson.decode(h[3] or '{}')
local changed = false
local by = cjson.decode(redis.call('HGET', KEYS[1], 'ansby') or '{}')
for i = 5, #ARGV, 2 do
  if requests[ARGV[i]] ~= nil and redis.call('HSETNX', KEYS[4], ARGV[i], ARGV[i + 1]) == 1 then
    changed = true
    by[ARGV[i]] = {by = ARGV[3], at = ms(clock()), from = ARGV[4]}
  end
end
if changed then redis.call('HSET', KEYS[1], 'ckpt', '1', 'ansby', cjson.encode(by)) end
redis.call('PEXPIREAT', KEYS[4], expiry())
local open, still = 0, {}
for key, request in pairs(requests) do
  if redis.call('HEXISTS', KEYS[4], key) == 0 then open = open + 1; still[key] = request end
end
local now = ms(clock())
if open > 0 then
  -- Partly answered: the job shows only the questions still open.
  local reply = {'waiting', open}
  redis.call('HSET', KEYS[1], 'rq', ARGV[1] .. ' ' .. cjson.encode(reply))
  if changed then
    redis.call('HSET', KEYS[1], 'inreq', cjson.encode(still), 'updated', now)
    emit(now, false)
  end
  return reply
end
redis.call('HSET', KEYS[1], 'state', $QUEUED, 'updated', now, 'msg', 'Input received; resuming.',
           'rq', ARGV[1] .. ' ' .. cjson.encode({$QUEUED, 0}))
redis.call('HDEL', KEYS[1], 'inreq')
emit(now, false)
return {$QUEUED, 0}
