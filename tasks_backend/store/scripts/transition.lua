-- KEYS: job, feed, steps, answers.
-- ARGV: request id, token ('' = not fenced), target state, allowed source states csv, owner ('' = any),
--       then name/value pairs.
-- Returns {outcome, state before, time of the change}: ok | missing | fenced | cancelled | illegal.
--
-- A completion by a token's holder keeps no reply record, and drops the claim's: only the holder of the
-- current token can complete a job (no sweep, claim or cancel completes one, and each of them that moves
-- the job on moves the token or the state), so a replay that finds the job completed under its own token
-- is that completion applied before, and answers as it did. Every finished job is then one field shorter.
-- Uses: job

local cur = redis.call('HMGET', KEYS[1], 'state', 'token', 'owner', 'msg', 'done', 'total', 'created', 'ttl',
                       'ckpt', 'ctok', 'rq', 'updated')
if not cur[1] then return {'missing', '', 0} end
if ARGV[5] ~= '' and cur[3] ~= ARGV[5] then return {'missing', '', 0} end
local again = replayed(cur[11], ARGV[1])
if again then return {'ok', again, cur[12]} end
local unrecorded = ARGV[2] ~= '' and ARGV[3] == $COMPLETED
if ARGV[2] ~= '' then
  local s = standing(cur[1], cur[2], cur[10], ARGV[2])
  if s == $CANCELLED then return {$CANCELLED, cur[1], 0} end
  if unrecorded and cur[1] == $COMPLETED and cur[2] == ARGV[2] then return {'ok', $RUNNING, cur[12]} end
  if s ~= 'ok' then return {'fenced', cur[1], 0} end
end
if not in_csv(cur[1], ARGV[4]) then return {'illegal', cur[1], 0} end
local now = ms(clock())
local sets, dels = {'state', ARGV[3], 'updated', now}, {}
if unrecorded then
  if cur[11] then table.insert(dels, 'rq') end
else
  table.insert(sets, 'rq'); table.insert(sets, ARGV[1] .. ' ' .. cur[1])
end
local changed = apply_fields(6, sets, dels)
local function after(name, before)
  if changed[name] == nil then return before end
  return changed[name]
end
feed(now, ARGV[3], after('msg', cur[4]), after('done', cur[5]), after('total', cur[6]),
     tonumber(cur[7]) + tonumber(cur[8]), in_csv(ARGV[3], $TERMINAL), cur[9])
return {'ok', cur[1], now}
