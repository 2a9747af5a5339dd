"""The Lua scripts behind every state change.

Each script touches one job's keys only (KEYS = job, events, steps, answers; one hash tag) or one
owner's keys only, so every script runs in a single Redis Cluster slot. A script that changes a job
gives every key it may have created the job's absolute expiry, appends one entry to the event feed,
and checks the fencing token where the caller is a worker. The hot scripts (claim, transition) read
the job once and write it once: each `redis.call` costs more than the Lua around it. Which states may
follow which is not decided here: the caller passes the allowed source states, derived from
`domain.ALLOWED_TRANSITIONS`.
"""

from __future__ import annotations

# Shared helpers, prepended to every job script.
_PRELUDE = r"""
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
local function feed(now, state, msg, done, total, exp, terminal, ckpt)
  local entry = {'s', state, 'u', now}
  if msg then table.insert(entry, 'm'); table.insert(entry, msg) end
  if done then table.insert(entry, 'd'); table.insert(entry, done) end
  if total then table.insert(entry, 't'); table.insert(entry, total) end
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', 128, '*', unpack(entry))
  if terminal then
    -- Nothing replays a finished job: drop its checkpoints, and keep the feed only long enough
    -- for live subscribers and push deliveries (which retry for up to a minute) to read the final entry.
    if ckpt then redis.call('DEL', KEYS[3], KEYS[4]) end
    redis.call('PEXPIREAT', KEYS[2], math.min(exp, tonumber(now) + 60000))
  else
    redis.call('PEXPIREAT', KEYS[2], exp)
  end
end

-- The same, reading the job's state back from its hash.
local function emit(now, terminal)
  local h = redis.call('HMGET', KEYS[1], 'state', 'msg', 'done', 'total', 'created', 'ttl', 'ckpt')
  feed(now, h[1], h[2], h[3], h[4], tonumber(h[5]) + tonumber(h[6]), terminal, h[7])
end

-- Write the name/value pairs in ARGV from index `from` after the pairs in `sets`, in one HSET; an
-- empty value deletes the field. Returns each named field's new value (false: deleted).
local function apply_fields(from, sets)
  local dels, changed = {}, {}
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
"""

# ARGV: now, expiry (createdAt + ttlMs), name/value pairs of the new record (state first).
# The hot path of every submit: a handful of calls, nothing read back.
CREATE = r"""
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('XADD', KEYS[2], 'MAXLEN', '~', 128, '*', 's', ARGV[4], 'u', ARGV[1])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
redis.call('PEXPIREAT', KEYS[2], ARGV[2])
return 1
"""

# KEYS: owner index [, idempotency key]. ARGV: job id, score, index ttl ms, idem value, idem ttl ms, prune below.
# Returns nil when indexed, or the existing idempotency value when the key was taken.
OWNER_INDEX = r"""
if #KEYS == 2 then
  if not redis.call('SET', KEYS[2], ARGV[4], 'NX', 'PX', ARGV[5]) then
    return redis.call('GET', KEYS[2]) or ''
  end
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return false
"""

# ARGV: now, token ('' = not fenced), target state, allowed source states csv, terminal states csv,
#       owner ('' = any), then name/value pairs.
# Returns {outcome, state before}: ok | missing | fenced | illegal.
TRANSITION = r"""
local cur = redis.call('HMGET', KEYS[1], 'state', 'token', 'owner', 'msg', 'done', 'total', 'created', 'ttl',
                       'ckpt')
if not cur[1] then return {'missing', ''} end
if ARGV[6] ~= '' and cur[3] ~= ARGV[6] then return {'missing', ''} end
if ARGV[2] ~= '' and cur[2] ~= ARGV[2] then return {'fenced', cur[1]} end
if not in_csv(cur[1], ARGV[4]) then return {'illegal', cur[1]} end
local changed = apply_fields(7, {'state', ARGV[3], 'updated', ARGV[1]})
local function after(name, before)
  if changed[name] == nil then return before end
  return changed[name]
end
feed(ARGV[1], ARGV[3], after('msg', cur[4]), after('done', cur[5]), after('total', cur[6]),
     tonumber(cur[7]) + tonumber(cur[8]), in_csv(ARGV[3], ARGV[5]), cur[9])
return {'ok', cur[1]}
"""

# ARGV: now, lease ms, worker name, max attempts, terminal csv, exhausted error json.
# Returns {outcome, token[, the claimed record as HGETALL]}: ok | missing | terminal | parked | busy |
# cancelled | exhausted.
CLAIM = r"""
local flat = redis.call('HGETALL', KEYS[1])
if #flat == 0 then return {'missing', 0} end
local h = {}
for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
local state = h.state
if in_csv(state, ARGV[5]) then return {'terminal', 0} end
if state == 'input_required' then return {'parked', 0} end
local now = tonumber(ARGV[1])
if state == 'running' and tonumber(h.lease or 0) > now then return {'busy', 0} end
if h.cancel == '1' then
  redis.call('HSET', KEYS[1], 'state', 'cancelled', 'updated', ARGV[1])
  redis.call('HDEL', KEYS[1], 'lease', 'worker')
  emit(ARGV[1], true)
  return {'cancelled', 0}
end
local attempts = tonumber(h.attempts or 0) + 1
if attempts > tonumber(ARGV[4]) then
  redis.call('HSET', KEYS[1], 'state', 'failed', 'updated', ARGV[1], 'error', ARGV[6])
  redis.call('HDEL', KEYS[1], 'lease', 'worker')
  emit(ARGV[1], true)
  return {'exhausted', 0}
end
local token = tostring(tonumber(h.token or 0) + 1)
local claimed = {state = 'running', updated = ARGV[1], token = token,
                 lease = string.format('%d', now + tonumber(ARGV[2])), attempts = tostring(attempts),
                 worker = ARGV[3]}
local sets = {}
for name, value in pairs(claimed) do
  h[name] = value; table.insert(sets, name); table.insert(sets, value)
end
redis.call('HSET', KEYS[1], unpack(sets))
-- A fresh run reports its own progress; notes like "Input received; resuming." no longer apply.
if h.msg then redis.call('HDEL', KEYS[1], 'msg'); h.msg = nil end
feed(ARGV[1], 'running', nil, h.done, h.total, tonumber(h.created) + tonumber(h.ttl), false, h.ckpt)
local record = {}
for name, value in pairs(h) do table.insert(record, name); table.insert(record, value) end
return {'ok', token, record}
"""

# ARGV: now, token, lease ms. Returns 1 if cancellation was requested, 0 if not, -1 if fenced or gone.
RENEW = r"""
local h = redis.call('HMGET', KEYS[1], 'state', 'token', 'cancel')
if h[1] ~= 'running' or h[2] ~= ARGV[2] then return -1 end
redis.call('HSET', KEYS[1], 'lease', tonumber(ARGV[1]) + tonumber(ARGV[3]))
if h[3] == '1' then return 1 end
return 0
"""

# ARGV: now, token, message ('' keeps), done ('' keeps), total ('' keeps).
# Returns like RENEW. Progress is a change of the job, so it moves `updated` and appends to the feed.
PROGRESS = r"""
local h = redis.call('HMGET', KEYS[1], 'state', 'token', 'cancel')
if h[1] ~= 'running' or h[2] ~= ARGV[2] then return -1 end
redis.call('HSET', KEYS[1], 'updated', ARGV[1])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'msg', ARGV[3]) end
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'done', ARGV[4]) end
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'total', ARGV[5]) end
emit(ARGV[1], false)
if h[3] == '1' then return 1 end
return 0
"""

# ARGV: now, token, step name, JSON value. Returns {'ok'|'exists'|'fenced', value}.
STEP = r"""
local h = redis.call('HMGET', KEYS[1], 'state', 'token')
if h[1] ~= 'running' or h[2] ~= ARGV[2] then return {'fenced', ''} end
if redis.call('HSETNX', KEYS[3], ARGV[3], ARGV[4]) == 0 then
  return {'exists', redis.call('HGET', KEYS[3], ARGV[3])}
end
redis.call('HSET', KEYS[1], 'ckpt', '1')
redis.call('PEXPIREAT', KEYS[3], expiry())
return {'ok', ARGV[4]}
"""

# ARGV: now, owner, terminal csv. Returns cancelled | requested | terminal | missing.
CANCEL = r"""
local h = redis.call('HMGET', KEYS[1], 'state', 'owner')
if not h[1] or h[2] ~= ARGV[2] then return 'missing' end
if in_csv(h[1], ARGV[3]) then return 'terminal' end
if h[1] == 'running' then
  redis.call('HSET', KEYS[1], 'cancel', '1', 'msg', 'Cancellation requested.', 'updated', ARGV[1])
  emit(ARGV[1], false)
  return 'requested'
end
redis.call('HSET', KEYS[1], 'state', 'cancelled', 'updated', ARGV[1], 'msg', 'Cancelled.')
redis.call('HDEL', KEYS[1], 'inreq', 'lease', 'worker')
emit(ARGV[1], true)
return 'cancelled'
"""

# ARGV: now, owner, then key/JSON answer pairs. Unknown and already answered keys are ignored.
# Returns {outcome, open count}: queued | waiting | conflict | missing.
INPUT = r"""
local h = redis.call('HMGET', KEYS[1], 'state', 'owner', 'inreq')
if not h[1] or h[2] ~= ARGV[2] then return {'missing', 0} end
if h[1] ~= 'input_required' then return {'conflict', 0} end
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
if open > 0 then
  -- Partly answered: the job shows only the questions still open.
  if changed then
    redis.call('HSET', KEYS[1], 'inreq', cjson.encode(still), 'updated', ARGV[1])
    emit(ARGV[1], false)
  end
  return {'waiting', open}
end
redis.call('HSET', KEYS[1], 'state', 'queued', 'updated', ARGV[1], 'msg', 'Input received; resuming.')
redis.call('HDEL', KEYS[1], 'inreq')
emit(ARGV[1], false)
return {'queued', 0}
"""

# ARGV: now, queued grace ms, max attempts, abandoned error json.
# Returns {action, when, operation}: republish | later | done | gone.
SWEEP_ONE = r"""
local h = redis.call('HMGET', KEYS[1], 'state', 'lease', 'cancel', 'attempts', 'updated', 'repub', 'op')
local state = h[1]
if not state then return {'gone', 0, ''} end
local now = tonumber(ARGV[1])
if state == 'queued' then
  local repub = tonumber(h[6] or 0)
  local due = tonumber(h[5]) + tonumber(ARGV[2]) * math.pow(2, math.min(repub, 6))
  if due > now then return {'later', due, h[7]} end
  redis.call('HSET', KEYS[1], 'repub', repub + 1)
  return {'republish', now + tonumber(ARGV[2]) * math.pow(2, math.min(repub + 1, 6)), h[7]}
end
if state ~= 'running' then return {'done', 0, h[7]} end
local lease = tonumber(h[2] or 0)
if lease > now then return {'later', lease, h[7]} end
if h[3] == '1' then
  redis.call('HSET', KEYS[1], 'state', 'cancelled', 'updated', ARGV[1], 'msg', 'Cancelled.')
  redis.call('HDEL', KEYS[1], 'lease', 'worker')
  emit(ARGV[1], true)
  return {'done', 0, h[7]}
end
if tonumber(h[4] or 0) >= tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[1], 'state', 'failed', 'updated', ARGV[1], 'error', ARGV[4])
  redis.call('HDEL', KEYS[1], 'lease', 'worker')
  emit(ARGV[1], true)
  return {'done', 0, h[7]}
end
redis.call('HSET', KEYS[1], 'state', 'queued', 'updated', ARGV[1], 'msg', 'Worker lost; requeued.', 'repub', 0)
redis.call('HDEL', KEYS[1], 'lease', 'worker')
emit(ARGV[1], false)
return {'republish', now + tonumber(ARGV[2]), h[7]}
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
}

SCRIPTS: dict[str, str] = {name: _PRELUDE + body for name, body in JOB_SCRIPTS.items()}
SCRIPTS["owner_index"] = OWNER_INDEX
