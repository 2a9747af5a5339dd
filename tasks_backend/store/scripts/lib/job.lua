-- KEYS: the job's own, by position: 1 job hash, 2 feed, 3 steps, 4 answers (one hash tag).
-- ARGV: read only by `apply_fields`, from the index it is given.
-- Helpers of the scripts that change one job: its expiry, its feed, field writes, a worker's standing.

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
    -- Nothing replays a completed job: drop its checkpoints. A failed or cancelled one keeps its steps
    -- (they expire with it) for a rerun that keeps them; its answers go. Keep the feed only long enough
    -- for live subscribers and push deliveries (which retry for up to a minute) to read the final entry.
    if ckpt then
      if state == $COMPLETED then redis.call('DEL', KEYS[3], KEYS[4]) else redis.call('DEL', KEYS[4]) end
    end
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

-- A worker's standing on the job, from its fencing token `mine`: it holds the job ('ok'), its run was
-- cancelled by the owner (cancelled: cancelling a run moves its token on and keeps the old one as
-- `ctok`), or it lost the job to a lapsed lease, expiry or another worker ('lost'). Outcomes that
-- say a job is now in some state are that state's name.
local function standing(state, token, ctok, mine)
  if token == mine and state == $RUNNING then return 'ok' end
  if ctok == mine and state == $CANCELLED then return $CANCELLED end
  return 'lost'
end
