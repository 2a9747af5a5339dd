-- KEYS: as lib/gate.lua's (the gate's keys from g; the broker queue at q, its counter q+1, its bypass list q+2 and
--       that list's counter q+3).
-- ARGV: none read; callers pass the values.
-- A lone owner's bypass of the gate (see gate_admit in lib/gate_pump.lua): its end, and the turns its owner takes
-- from the bypass list afterwards. Uses lib/gate.lua's helpers; used by lib/gate_pump.lua.

-- A lone owner's bypass (see gate_admit) ends when another job needs the gate: the owner ('bo' in `turns`) joins
-- the ring while jobs of its bypass still wait in the bypass list (the broker queue's priority-9 list, KEYS[q + 2],
-- which workers read only when the queue's own list is empty), and takes turns from there like held jobs
-- (gate_backlog). Returns true when no bypass is left (none, or its list is empty: it is forgotten). Applied twice,
-- the owner is in the ring already.
local function gate_bypass_end(g, q, ttl)
  if not q then return true end
  local bo = redis.call('HGET', KEYS[g + 2], 'bo')
  if not bo then return true end
  if redis.call('LLEN', KEYS[q + 2]) == 0 then
    redis.call('HDEL', KEYS[g + 2], 'bo', 'bp')
    return true
  end
  ring_join(g, bo, ttl)
  return false
end

-- The bypass owner's turn (gate_bypass_end), its first held job that may go now being `chosen` (its entry; nil:
-- none): the oldest job of its bypass list goes to the end of the queue's own list (counted as a push there: it
-- left the bypass list) and into flight, unless `chosen` comes first (a higher priority, or the same and an earlier
-- place: a job that waited and came back). Returns whether a message was moved (false: `chosen` goes instead),
-- whether it was a bypassed job (counted in flight), and how many messages the list held. An empty list ends the
-- bypass.
local function gate_backlog(g, q, cttl, now, ttl, flying, chosen)
  local left = redis.call('LLEN', KEYS[q + 2])
  if left == 0 then
    redis.call('HDEL', KEYS[g + 2], 'bo', 'bp')
    return false, false, 0
  end
  local msg = redis.call('LINDEX', KEYS[q + 2], -1)
  local at = string.find(msg, '"correlation_id": "', 1, true)
  local id = at and string.sub(msg, at + 19, string.find(msg, '"', at + 19, true) - 1)
  local raw = id and redis.call('HGET', KEYS[g], id)
  local info = raw and gate_info(raw)
  if info and info.t ~= 'b' then info = nil end
  if chosen then
    local bp = tonumber(redis.call('HGET', KEYS[g + 2], 'bp'))
    local cs = tonumber(chosen.s) or 0
    if chosen.p > bp or (chosen.p == bp and info and cs < (tonumber(info.s) or 0)) then return false, false, left end
  end
  redis.call('RPOPLPUSH', KEYS[q + 2], KEYS[q])
  push_counted(q, nil, cttl, ttl)
  if info then
    info.t = 'f'
    gate_put(g, id, info, ttl, false)
    redis.call('ZADD', KEYS[g + 3], now, id)
    if flying == 0 then redis.call('PEXPIRE', KEYS[g + 3], ttl) end
  end
  return true, info ~= nil, left
end
