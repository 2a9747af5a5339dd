-- KEYS: job, feed, steps, answers.
-- ARGV: request id, queued grace ms, max attempts, abandoned error json, messages ever pushed to the
--       job's queue and messages waiting in it now ('' and '' when the broker does not say), then 'b' when
--       those are the bypass list's (a job sent past the dispatch gate, lib/gate.lua), else ''.
-- Returns {action, when (Redis ms), operation}: republish | later | done | gone.
--
-- A queued job is republished only when its message was lost, not when it waits behind others. With
-- the counts of the Redis broker, messages that have left the queue = pushed - waiting. The first look
-- past grace marks the job with `pushed`: its message, if ever sent, is among those. Once as many have
-- left, the message has been taken; the worker that took it gets a grace to claim the job (`gone` says
-- since when), and a job still queued after that lost its message (a lost publish, or a message lost in
-- a worker's fetch window). Other brokers: republish after grace, 2x grace, 4x grace, ...
-- Uses: job

-- A job's marks in the bypass list and in the queue are kept apart: its message may move from one to the other.
local markf, gonef = (ARGV[7] or '') .. 'mark', (ARGV[7] or '') .. 'gone'
local h = redis.call('HMGET', KEYS[1], 'state', 'lease', 'attempts', 'updated', 'repub', 'op', markf, 'rq', gonef)
local state = h[1]
if not state then return {'gone', 0, ''} end
local again = replayed(h[8], ARGV[1])
if again then return cjson.decode(again) end
local now = clock()
local grace = tonumber(ARGV[2])
local function remember(reply)
  redis.call('HSET', KEYS[1], 'rq', ARGV[1] .. ' ' .. cjson.encode(reply))
  return reply
end
if state == $QUEUED then
  local ready = tonumber(h[4]) + grace
  if ready > now then return {'later', ms(ready), h[6]} end
  if ARGV[5] ~= '' then
    local pushed = tonumber(ARGV[5])
    local left = pushed - tonumber(ARGV[6])
    local mark = tonumber(h[7])
    if mark == nil or mark > pushed then
      -- First look (or the counter started again): messages still waiting may include this one.
      if left < pushed then
        redis.call('HSET', KEYS[1], markf, ms(pushed))
        return {'later', ms(now + grace), h[6]}
      end
    elseif left < mark then
      return {'later', ms(now + grace), h[6]}
    end
    local gone = tonumber(h[9])
    if gone == nil then
      redis.call('HSET', KEYS[1], gonef, ms(now))
      return {'later', ms(now + grace), h[6]}
    end
    if gone + grace > now then return {'later', ms(gone + grace), h[6]} end
    redis.call('HDEL', KEYS[1], 'mark', 'gone', 'bmark', 'bgone')
    return remember({'republish', ms(now + grace), h[6]})
  end
  local repub = tonumber(h[5] or 0)
  local due = tonumber(h[4]) + grace * math.pow(2, math.min(repub, 6))
  if due > now then return {'later', ms(due), h[6]} end
  redis.call('HSET', KEYS[1], 'repub', repub + 1)
  return remember({'republish', ms(now + grace * math.pow(2, math.min(repub + 1, 6))), h[6]})
end
if state ~= $RUNNING then return {'done', 0, h[6]} end
local lease = tonumber(h[2] or 0)
if lease > now then return {'later', ms(lease), h[6]} end
if tonumber(h[3] or 0) >= tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[1], 'state', $FAILED, 'updated', ms(now), 'error', ARGV[4])
  redis.call('HDEL', KEYS[1], 'lease', 'worker')
  emit(ms(now), true)
  return remember({'done', 0, h[6]})
end
redis.call('HSET', KEYS[1], 'state', $QUEUED, 'updated', ms(now), 'msg', 'Worker lost; requeued.', 'repub', 0)
redis.call('HDEL', KEYS[1], 'lease', 'worker', 'mark', 'gone', 'bmark', 'bgone')
emit(ms(now), false)
return remember({'republish', ms(now + grace), h[6]})
