"""The Lua scripts behind every state change.

Each job script touches one job's keys only (one hash tag) and each schedule script one global sorted set, so
every script runs in a single Redis Cluster slot. A script that changes a job gives every key it may create the
job's absolute expiry, appends one event to the feed, and checks the fencing token where a worker calls.
Rules: Redis is the one clock (every time written or compared is `redis.call('TIME')`); applied twice, a script
gives the same outcome (a caller's request id and its reply are kept in the job hash's `rq`; a completion's
replay is known by its token); which state may follow which comes only from `domain.ALLOWED_TRANSITIONS`
(`$NAME` and `$TERMINAL`-style placeholders rendered at import). The hot scripts (claim, transition) read the
job once and write it once.
"""

from __future__ import annotations

from collections.abc import Mapping
from string import Template

from ..model.domain import TERMINAL_STATES, JobState, sources_of

# Shared helpers, prepended to every job script.
_PRELUDE = r"""
-- Redis's time in ms; `t` a TIME reply already read in this script, if any.
local function clock(t)
  t = t or redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Integers as Redis stores them (tostring would print large numbers in exponent form).
local function ms(x)
  return string.format('%d', x)
end

local function in_csv(value, csv)
  return string.find(',' .. csv .. ',', ',' .. value .. ',', 1, true) ~= nil
end

-- A job's keys all expire at createdAt + ttlMs. The job hash gets that expiry when it is created and
-- no script ever recreates it, so only the keys that can be created later are given it again.
local function expiry()
  local h = redis.call('HMGET', KEYS[1], 'created', 'ttl')
  return tonumber(h[1]) + tonumber(h[2])
end

-- Append one entry (the job's public state after a change) to its feed. `ckpt` says whether the job
-- ever recorded a step or an answer (most jobs never do, and then have nothing to delete).
-- The feed is made with the job and given the job's expiry then, and XADD keeps a key's expiry, so
-- an entry of a job still going needs no PEXPIREAT: only a feed that is gone (evicted, deleted by hand)
-- is made again here, and given the expiry with it (NOMKSTREAM: Redis 6.2 or later).
local function feed(now, state, msg, done, total, exp, terminal, ckpt)
  local entry = {'s', state, 'u', now}
  if msg then table.insert(entry, 'm'); table.insert(entry, msg) end
  if done then table.insert(entry, 'd'); table.insert(entry, done) end
  if total then table.insert(entry, 't'); table.insert(entry, total) end
  if terminal then
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', 128, '*', unpack(entry))
    -- Nothing replays a finished job: drop its checkpoints, and keep the feed only long enough
    -- for live subscribers and push deliveries (which retry for up to a minute) to read the final entry.
    if ckpt then redis.call('DEL', KEYS[3], KEYS[4]) end
    redis.call('PEXPIREAT', KEYS[2], math.min(exp, tonumber(now) + 60000))
  elseif not redis.call('XADD', KEYS[2], 'NOMKSTREAM', 'MAXLEN', '~', 128, '*', unpack(entry)) then
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', 128, '*', unpack(entry))
    redis.call('PEXPIREAT', KEYS[2], exp)
  end
end

-- The same, reading the job's state back from its hash.
local function emit(now, terminal)
  local h = redis.call('HMGET', KEYS[1], 'state', 'msg', 'done', 'total', 'created', 'ttl', 'ckpt')
  feed(now, h[1], h[2], h[3], h[4], tonumber(h[5]) + tonumber(h[6]), terminal, h[7])
end

-- Write the name/value pairs in ARGV from index `from` after the pairs in `sets`, in one HSET; an
-- empty value deletes the field, as does each name already in `dels`, in one HDEL. Returns each
-- named field's new value (false: deleted).
local function apply_fields(from, sets, dels)
  local changed = {}
  for i = from, #ARGV, 2 do
    if ARGV[i + 1] == '' then
      table.insert(dels, ARGV[i]); changed[ARGV[i]] = false
    else
      table.insert(sets, ARGV[i]); table.insert(sets, ARGV[i + 1]); changed[ARGV[i]] = ARGV[i + 1]
    end
  end
  redis.call('HSET', KEYS[1], unpack(sets))
  if #dels > 0 then redis.call('HDEL', KEYS[1], unpack(dels)) end
  return changed
end

-- The reply remembered for request `rid` in `rq` ('<request id> <reply>'), or nil for another request.
local function replayed(rq, rid)
  if not rq or rid == '' then return nil end
  if string.sub(rq, 1, #rid + 1) == rid .. ' ' then return string.sub(rq, #rid + 2) end
  return nil
end

-- A worker's standing on the job, from its fencing token `mine`: it holds the job ('ok'), its run was
-- cancelled by the owner (cancelled: cancelling a run moves its token on and keeps the old one as
-- `ctok`), or it lost the job to a lapsed lease, expiry or another worker ('lost'). Outcomes that
-- say a job is now in some state are that state's name.
local function standing(state, token, ctok, mine)
  if token == mine and state == $RUNNING then return 'ok' end
  if ctok == mine and state == $CANCELLED then return $CANCELLED end
  return 'lost'
end
"""

# A submit writes the job (`create_job`), indexes it for its owner, claiming its idempotency key (`index_owner`),
# and puts it on the sweep schedule (`schedule`). On a single Redis one script (SUBMIT) does all three, and the
# enqueue when the broker is the same Redis; a Redis Cluster keeps them apart, one slot each (CREATE, OWNER_INDEX,
# SCHEDULE).

# KEYS[1], KEYS[2]: the job hash and its feed. ARGV from `at`: request id, ttl ms, then the new record's name/value
# pairs (state first) to the end. Sets `created` and `updated` from Redis's clock (`t`: a TIME reply, or nil) and
# returns that time (the replay of its own request returns the same); false if another request made the job.
_CREATE_FN = r"""
local function create_job(at, t)
  local rid = ARGV[at]
  local prev = redis.call('HMGET', KEYS[1], 'rq', 'created')
  if prev[2] then
    if replayed(prev[1], rid) then return prev[2] end
    return false
  end
  local now = ms(clock(t))
  redis.call('HSET', KEYS[1], 'created', now, 'updated', now, 'rq', rid .. ' ', unpack(ARGV, at + 2))
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', 128, '*', 's', ARGV[at + 3], 'u', now)
  local exp = tonumber(now) + tonumber(ARGV[at + 1])
  redis.call('PEXPIREAT', KEYS[1], exp)
  redis.call('PEXPIREAT', KEYS[2], exp)
  return now
end
"""

# The owner index KEYS[ix] scores the job with Redis's time in ms with microseconds (quick submissions list in the
# order made). With an idempotency key KEYS[ik] (ik nil: none) it claims the key first. Returns nil when indexed,
# or the value the key holds when another request took it. (Keys by position: a script names only its KEYS.)
_INDEX_FN = r"""
local function index_owner(ix, ik, job_id, index_ttl, idem_value, idem_ttl, max_ttl, t)
  if ik then
    if not redis.call('SET', KEYS[ik], idem_value, 'NX', 'PX', idem_ttl) then
      local held = redis.call('GET', KEYS[ik])
      -- Our own value: this is the replay of a request whose reply was lost.
      if held ~= idem_value then return held or '' end
    end
  end
  t = t or redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
  redis.call('ZADD', KEYS[ix], string.format('%.3f', now), job_id)
  redis.call('ZREMRANGEBYSCORE', KEYS[ix], '-inf', '(' .. string.format('%d', now - tonumber(max_ttl)))
  redis.call('PEXPIRE', KEYS[ix], index_ttl)
  return nil
end
"""

# Each (delay ms, member) pair of `entries` becomes due `delay` from now in the schedule KEYS[ks]. Returns now.
_SCHEDULE_FN = r"""
local function schedule(ks, key_ttl, entries, t)
  t = t or redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local args = {}
  for i = 1, #entries, 2 do
    table.insert(args, string.format('%d', now + tonumber(entries[i])))
    table.insert(args, entries[i + 1])
  end
  redis.call('ZADD', KEYS[ks], unpack(args))
  redis.call('PEXPIRE', KEYS[ks], key_ttl)
  return string.format('%d', now)
end
"""

# ARGV: request id, ttl ms, name/value pairs of the new record (state first). See `create_job`.
CREATE = _CREATE_FN + "return create_job(1)\n"

# KEYS: owner index [, idempotency key]. ARGV: job id, index ttl ms, idem value, idem ttl ms, max ttl ms.
# Returns nil when indexed, or the existing idempotency value when another request took the key.
OWNER_INDEX = _INDEX_FN + (
    "return index_owner(1, #KEYS == 2 and 2 or nil, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])\n")

# The whole submit on a single Redis (see `create_job`): calling a script costs Redis more than the commands in
# it, and this is the hot path of every submit.
# KEYS: job, feed, owner index, sweep schedule, then the idempotency key if ARGV[3] is not '', then the queue and
#       the push counter if ARGV[5] is not ''.
# ARGV: job id, max ttl ms (the owner index's and the schedule's ttl, and how far back the index keeps jobs), idem
#       value ('' = no key), sweep delay ms, message to push ('' = none), push counter ttl ms ('' = leave it),
#       request id, job ttl ms, then the record's pairs.
# Returns {createdAt, nil} when made; {createdAt, the value the key holds} when another request holds the
# idempotency key (the job is made but neither indexed nor enqueued: the caller discards it); {nil, nil} if the id
# was taken.
# Applied twice it answers the same and pushes twice; a second message for one job is refused by the claim's
# fencing.
SUBMIT = _CREATE_FN + _INDEX_FN + _SCHEDULE_FN + r"""
local t = redis.call('TIME')
local created = create_job(7, t)
if not created then return {false, false} end
local k = 5
local idem
if ARGV[3] ~= '' then idem = k; k = k + 1 end
local held = index_owner(3, idem, ARGV[1], ARGV[2], ARGV[3], ARGV[8], ARGV[2], t)
if held then return {created, held} end
schedule(4, ARGV[2], {ARGV[4], ARGV[1]}, t)
if ARGV[5] ~= '' then
  redis.call('LPUSH', KEYS[k], ARGV[5])
  redis.call('INCR', KEYS[k + 1])
  if ARGV[6] ~= '' then redis.call('PEXPIRE', KEYS[k + 1], ARGV[6]) end
end
return {created, false}
"""

# ARGV: request id, token ('' = not fenced), target state, allowed source states csv, owner ('' = any),
#       then name/value pairs.
# Returns {outcome, state before, time of the change}: ok | missing | fenced | cancelled | illegal.
#
# A completion by a token's holder keeps no reply record, and drops the claim's: only the holder of the
# current token can complete a job (no sweep, claim or cancel completes one, and each of them that moves
# the job on moves the token or the state), so a replay that finds the job completed under its own token
# is that completion applied before, and answers as it did. Every finished job is then one field shorter.
TRANSITION = r"""
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
"""

# ARGV: request id, lease ms, worker name, max attempts, exhausted error json.
# Returns {outcome, token[, the job hash as HGETALL read it, the name/value pairs the claim wrote]}: ok |
# missing | terminal | parked | busy | exhausted (on "ok" the caller lays the second list over the first,
# and drops `msg`, `mark` and `gone`; a replayed "ok" carries the hash as written, and no second list).
# A running job whose lease lapsed may be claimed again (its worker is fenced by the new token).
# The reply carries the hash as read rather than a rebuilt record: turning Lua tables into a reply
# costs Redis more per element than anything else here.
CLAIM = r"""
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
if h.msg or h.mark or h.gone then redis.call('HDEL', KEYS[1], 'msg', 'mark', 'gone') end
feed(stamp, $RUNNING, nil, h.done, h.total, tonumber(h.created) + tonumber(h.ttl), false, h.ckpt)
return {'ok', token, flat, sets}
"""

# ARGV: token, lease ms. Returns 1 if the run was cancelled, 0 carry on, -1 lost. Applied twice, the
# lease ends up the same.
RENEW = r"""
local h = redis.call('HMGET', KEYS[1], 'state', 'token', 'ctok')
local s = standing(h[1], h[2], h[3], ARGV[1])
if s == $CANCELLED then return 1 end
if s ~= 'ok' then return -1 end
redis.call('HSET', KEYS[1], 'lease', ms(clock() + tonumber(ARGV[2])))
return 0
"""

# ARGV: token, message ('' keeps), done ('' keeps), total ('' keeps).
# Returns like RENEW. Progress is a change of the job, so it moves `updated` and appends to the feed
# (a replay appends the same figures again, which changes nothing a reader sees).
PROGRESS = r"""
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
"""

# ARGV: token, step name, JSON value. Returns {'ok'|'exists'|'fenced'|'cancelled', value}; a replay
# finds its own value and answers 'exists' with it, which the caller reads the same way.
STEP = r"""
local h = redis.call('HMGET', KEYS[1], 'state', 'token', 'ctok')
local s = standing(h[1], h[2], h[3], ARGV[1])
if s == $CANCELLED then return {$CANCELLED, ''} end
if s ~= 'ok' then return {'fenced', ''} end
if redis.call('HSETNX', KEYS[3], ARGV[2], ARGV[3]) == 0 then
  return {'exists', redis.call('HGET', KEYS[3], ARGV[2])}
end
redis.call('HSET', KEYS[1], 'ckpt', '1')
redis.call('PEXPIREAT', KEYS[3], expiry())
return {'ok', ARGV[3]}
"""

# ARGV: request id, owner. Returns cancelled | terminal | missing.
# Any job that may still change is cancelled at once; a running one's worker is fenced out (its token
# moves on) and stops at its next cancellation point, recording nothing more.
CANCEL = r"""
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
"""

# ARGV: request id, owner, then key/JSON answer pairs. Unknown and already answered keys are ignored.
# Returns {outcome, open count}: queued | waiting | conflict | missing. The caller puts the job on the
# sweep schedule in the same round trip, before this script, so a job it queues always has an entry.
INPUT = r"""
local h = redis.call('HMGET', KEYS[1], 'state', 'owner', 'inreq', 'rq')
if not h[1] or h[2] ~= ARGV[2] then return {'missing', 0} end
local again = replayed(h[4], ARGV[1])
if again then return cjson.decode(again) end
if h[1] ~= $INPUT_REQUIRED then return {'conflict', 0} end
local requests = cjson.decode(h[3] or '{}')
local changed = false
for i = 3, #ARGV, 2 do
  if requests[ARGV[i]] ~= nil and redis.call('HSETNX', KEYS[4], ARGV[i], ARGV[i + 1]) == 1 then
    changed = true
  end
end
if changed then redis.call('HSET', KEYS[1], 'ckpt', '1') end
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
"""

# ARGV: request id, queued grace ms, max attempts, abandoned error json, messages ever pushed to the
# job's queue and messages waiting in it now ('' and '' when the broker does not say).
# Returns {action, when (Redis ms), operation}: republish | later | done | gone.
#
# A queued job is republished only when its message was lost, not when it waits behind others. With
# the counts of the Redis broker, messages that have left the queue = pushed - waiting. The first look
# past grace marks the job with `pushed`: its message, if ever sent, is among those. Once as many have
# left, the message has been taken; the worker that took it gets a grace to claim the job (`gone` says
# since when), and a job still queued after that lost its message (a lost publish, or a message lost in
# a worker's fetch window). Other brokers: republish after grace, 2x grace, 4x grace, ...
SWEEP_ONE = r"""
local h = redis.call('HMGET', KEYS[1], 'state', 'lease', 'attempts', 'updated', 'repub', 'op', 'mark', 'rq', 'gone')
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
        redis.call('HSET', KEYS[1], 'mark', ms(pushed))
        return {'later', ms(now + grace), h[6]}
      end
    elseif left < mark then
      return {'later', ms(now + grace), h[6]}
    end
    local gone = tonumber(h[9])
    if gone == nil then
      redis.call('HSET', KEYS[1], 'gone', ms(now))
      return {'later', ms(now + grace), h[6]}
    end
    if gone + grace > now then return {'later', ms(gone + grace), h[6]} end
    redis.call('HDEL', KEYS[1], 'mark', 'gone')
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
redis.call('HDEL', KEYS[1], 'lease', 'worker', 'mark', 'gone')
emit(ms(now), false)
return remember({'republish', ms(now + grace), h[6]})
"""

# -- schedules (one global sorted set per script; members are job ids, scores Redis ms) ----------------

# ARGV: key ttl ms, then (delay ms, member) pairs: each member becomes due `delay` from now. Returns now.
SCHEDULE = _SCHEDULE_FN + r"""
local entries = {}
for i = 2, #ARGV do table.insert(entries, ARGV[i]) end
return schedule(1, ARGV[1], entries)
"""

# ARGV: limit. Returns {now, member, score, member, score, ...}: the members due now, oldest first.
DUE = r"""
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, ARGV[1])
table.insert(due, 1, now)
return due
"""

# ARGV: (member, score seen, new score or '' to remove) triples. A member whose score changed since
# it was read (someone scheduled it again meanwhile) is left as it is: that newer entry wins.
RESCHEDULE = r"""
for i = 1, #ARGV, 3 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    if ARGV[i + 2] == '' then
      redis.call('ZREM', KEYS[1], ARGV[i])
    else
      redis.call('ZADD', KEYS[1], ARGV[i + 2], ARGV[i])
    end
  end
end
return #ARGV / 3
"""

JOB_SCRIPTS: dict[str, str] = {
    "create": CREATE,
    "transition": TRANSITION,
    "claim": CLAIM,
    "renew": RENEW,
    "progress": PROGRESS,
    "step": STEP,
    "cancel": CANCEL,
    "input": INPUT,
    "sweep_one": SWEEP_ONE,
    "submit": SUBMIT,
}
OTHER_SCRIPTS: dict[str, str] = {
    "owner_index": OWNER_INDEX,
    "schedule": SCHEDULE,
    "due": DUE,
    "reschedule": RESCHEDULE,
}


def _csv(states: frozenset[JobState] | tuple[JobState, ...], names: Mapping[JobState, str]) -> str:
    return "'" + ",".join(sorted(names[s] for s in states)) + "'"


def state_names(names: Mapping[JobState, str] | None = None) -> dict[str, str]:
    """The placeholders of the scripts: each state's name as a Lua string, and the sets of states the
    scripts check, taken from the state table. `names` renames states (to check that nothing else
    in a script names one)."""
    names = names or {s: s.value for s in JobState}
    out = {s.name: f"'{names[s]}'" for s in JobState}
    out.update({
        "TERMINAL": _csv(TERMINAL_STATES, names),
        "CANCELLABLE": _csv(sources_of(JobState.CANCELLED), names),
        # A lapsed run is claimed again as well: that is a takeover by a new token, not a transition.
        "CLAIMABLE": _csv(tuple(s for s in sources_of(JobState.RUNNING) if s is not JobState.RUNNING), names),
    })
    return out


def render(names: Mapping[JobState, str] | None = None) -> dict[str, str]:
    """Every script by name, with the state names and sets substituted."""
    values = state_names(names)
    scripts = {name: Template(_PRELUDE + body).substitute(values) for name, body in JOB_SCRIPTS.items()}
    scripts.update({name: Template(body).substitute(values) for name, body in OTHER_SCRIPTS.items()})
    return scripts


SCRIPTS: dict[str, str] = render()
