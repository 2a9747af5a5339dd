-- KEYS: the job's own (see lib/job.lua).
-- ARGV: from index a + 1: transition.lua's.
-- A job's move to another state (transition.lua), for the scripts that move it and do more in the same call:
-- returns transition.lua's reply, and true when the move was made now (not answered as a replay).

local function transition(a)
  local cur = redis.call('HMGET', KEYS[1], 'state', 'token', 'owner', 'msg', 'done', 'total', 'created', 'ttl',
                         'ckpt', 'ctok', 'rq', 'updated')
  if not cur[1] then return {'missing', '', 0} end
  if ARGV[a + 5] ~= '' and cur[3] ~= ARGV[a + 5] then return {'missing', '', 0} end
  local again = replayed(cur[11], ARGV[a + 1])
  if again then return {'ok', again, cur[12]} end
  local unrecorded = ARGV[a + 2] ~= '' and ARGV[a + 3] == $COMPLETED
  if ARGV[a + 2] ~= '' then
    local s = standing(cur[1], cur[2], cur[10], ARGV[a + 2])
    if s == $CANCELLED then return {$CANCELLED, cur[1], 0} end
    if unrecorded and cur[1] == $COMPLETED and cur[2] == ARGV[a + 2] then return {'ok', $RUNNING, cur[12]} end
    if s ~= 'ok' then return {'fenced', cur[1], 0} end
  end
  if not in_csv(cur[1], ARGV[a + 4]) then return {'illegal', cur[1], 0} end
  local now = ms(clock())
  local sets, dels = {'state', ARGV[a + 3], 'updated', now}, {}
  if unrecorded then
    if cur[11] then table.insert(dels, 'rq') end
  else
    table.insert(sets, 'rq'); table.insert(sets, ARGV[a + 1] .. ' ' .. cur[1])
  end
  local changed = apply_fields(a + 6, sets, dels)
  local function after(name, before)
    if changed[name] == nil then return before end
    return changed[name]
  end
  feed(now, ARGV[a + 3], after('msg', cur[4]), after('done', cur[5]), after('total', cur[6]),
       tonumber(cur[7]) + tonumber(cur[8]), in_csv(ARGV[a + 3], $TERMINAL), cur[9])
  return {'ok', cur[1], now}, true
end
