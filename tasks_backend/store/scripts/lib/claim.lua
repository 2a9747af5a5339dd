-- KEYS: the job's own four (lib/job.lua's), at 1 to 4.
-- ARGV: request id, lease ms, worker name, max attempts, exhausted error json, at 1 to 5.
-- A worker's claim of a job (claim.lua, and claim_fetched.lua in the worker's transport): see claim.lua for
-- the reply.

local function claim_job()
  local flat = redis.call('HGETALL', KEYS[1])
  if #flat == 0 then return {'missing', 0} end
  local h = {}
  for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
  local again = replayed(h.rq, ARGV[1])
  if again == 'ok' then return {'ok', h.token, flat, {}} end
  if again then return {again, 0} end
  local state = h.state
  if in_csv(state, $TERMINAL) then return {'terminal', 0} end
  local now = clock()
  if state == $RUNNING then
    if tonumber(h.lease or 0) > now then return {'busy', 0} end
  elseif not in_csv(state, $CLAIMABLE) then
    return {'parked', 0}
  end
  local attempts = tonumber(h.attempts or 0) + 1
  if attempts > tonumber(ARGV[4]) then
    redis.call('HSET', KEYS[1], 'state', $FAILED, 'updated', ms(now), 'error', ARGV[5],
               'rq', ARGV[1] .. ' exhausted')
    redis.call('HDEL', KEYS[1], 'lease', 'worker')
    emit(ms(now), true)
    return {'exhausted', 0}
  end
  local token = tostring(tonumber(h.token or 0) + 1)
  local stamp = ms(now)
  local sets = {'state', $RUNNING, 'updated', stamp, 'token', token, 'lease', ms(now + tonumber(ARGV[2])),
                'attempts', tostring(attempts), 'worker', ARGV[3], 'rq', ARGV[1] .. ' ok'}
  redis.call('HSET', KEYS[1], unpack(sets))
  -- A fresh run reports its own progress; notes like "Input received; resuming." no longer apply, and the
  -- sweeper's mark of where the last message stood in the queue belongs to the last time it was queued.
  if h.msg or h.mark or h.gone or h.bmark or h.bgone then
    redis.call('HDEL', KEYS[1], 'msg', 'mark', 'gone', 'bmark', 'bgone')
  end
  feed(stamp, $RUNNING, nil, h.done, h.total, tonumber(h.created) + tonumber(h.ttl), false, h.ckpt)
  return {'ok', token, flat, sets}
end
