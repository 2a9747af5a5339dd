-- KEYS: from position g (the caller's), the gate's keys in `Keys.gate_keys` order: g jobs, g+1 ring, g+2 turns,
--       g+3 flight, g+4 delayed, g+5 workers, g+6 slots, g+7 ready, g+8 conc; with `q` (nil: the caller
--       publishes what is released) the broker queue at q and its push counter at q+1 (the broker is this Redis).
-- ARGV: none read; callers pass the values.
-- The dispatch gate: a job's message goes to the broker only while fewer than `cap` are in flight (sent and not
-- finished); the others are held in `ready` (members '<owner>:<9 - priority>:<sequence>:<id>', all scored 0,
-- so an owner's jobs sort by priority, then submission), and released owner by owner in turn (the ring: the
-- owner served longest ago first). `conc` counts the jobs in flight per concurrency value. A job's `info`:
-- o owner, p priority, k its member in `ready` (kept across re-admissions), c concurrency value ('' none), m its
-- max, x the message or operation, t where it is (h held, d delayed, f in flight, x out: parked, between runs).

-- A delay as callers pass it: ms from now, or '@' and an absolute time (Redis ms).
local function gate_delay(spec, now)
  if string.sub(spec, 1, 1) == '@' then return tonumber(string.sub(spec, 2)) - now end
  return tonumber(spec)
end

local function gate_put(g, id, info, ttl)
  redis.call('HSET', KEYS[g], id, cjson.encode(info))
  redis.call('PEXPIRE', KEYS[g], ttl)
end

-- The worker slots the live workers published (`fallback` when none did); unbounded when fair shares are off.
local function gate_cap(g, now, fallback, fair)
  if fair ~= '1' then return 1e12 end
  local names = redis.call('ZRANGEBYSCORE', KEYS[g + 5], now, '+inf')
  if #names == 0 then return tonumber(fallback) end
  local total = 0
  for _, n in ipairs(redis.call('HMGET', KEYS[g + 6], unpack(names))) do total = total + (tonumber(n) or 0) end
  return total
end

local function conc_free(g, info)
  if info.c == '' then return true end
  return tonumber(redis.call('HGET', KEYS[g + 8], info.c) or '0') < tonumber(info.m)
end

local function gate_hold(g, id, info, ttl)
  if not info.k then
    local seq = redis.call('HINCRBY', KEYS[g + 2], 'seq', 1)
    redis.call('PEXPIRE', KEYS[g + 2], ttl)
    info.k = string.format('%s:%d:%013d:%s', info.o, 9 - tonumber(info.p), seq, id)
  end
  info.t = 'h'
  gate_put(g, id, info, ttl)
  redis.call('ZADD', KEYS[g + 7], 0, info.k)
  redis.call('PEXPIRE', KEYS[g + 7], ttl)
  if not redis.call('ZSCORE', KEYS[g + 1], info.o) then
    -- A newcomer goes ahead of every owner served since the last turn began.
    local turn = tonumber(redis.call('HGET', KEYS[g + 2], 'turn') or '0')
    redis.call('ZADD', KEYS[g + 1], turn - 0.5, info.o)
  end
  redis.call('PEXPIRE', KEYS[g + 1], ttl)
end

local function gate_release(g, q, cttl, id, info, now, ttl, out)
  info.t = 'f'
  gate_put(g, id, info, ttl)
  redis.call('ZADD', KEYS[g + 3], now, id)
  redis.call('PEXPIRE', KEYS[g + 3], ttl)
  if info.c ~= '' then
    redis.call('HINCRBY', KEYS[g + 8], info.c, 1)
    redis.call('PEXPIRE', KEYS[g + 8], ttl)
  end
  if q then
    redis.call('LPUSH', KEYS[q], info.x)
    redis.call('INCR', KEYS[q + 1])
    if cttl ~= '' then redis.call('PEXPIRE', KEYS[q + 1], cttl) end
  else
    table.insert(out, id); table.insert(out, info.x)
  end
end

-- Delayed jobs now due join their owners' queues; then held jobs are released while there is room, one per
-- owner per turn, each owner's first job whose concurrency value has room (among its first 50).
local function gate_pump(g, q, cttl, now, cap, ttl, out)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[g + 4], '-inf', now, 'LIMIT', 0, 500)) do
    redis.call('ZREM', KEYS[g + 4], id)
    local raw = redis.call('HGET', KEYS[g], id)
    if raw then gate_hold(g, id, cjson.decode(raw), ttl) end
  end
  local room = cap - redis.call('ZCARD', KEYS[g + 3])
  local rounds = 0
  while room > 0 and rounds < 1000 do
    rounds = rounds + 1
    local released = false
    for _, o in ipairs(redis.call('ZRANGE', KEYS[g + 1], 0, 63)) do
      if room <= 0 then break end
      local chosen, info
      local members = redis.call('ZRANGEBYLEX', KEYS[g + 7], '[' .. o .. ':', '(' .. o .. ';', 'LIMIT', 0, 50)
      for _, member in ipairs(members) do
        local id = string.sub(member, #o + 18)  -- after '<owner>:<digit>:<13 digits>:'
        local raw = redis.call('HGET', KEYS[g], id)
        local this = raw and cjson.decode(raw)
        if not this or this.t ~= 'h' then
          redis.call('ZREM', KEYS[g + 7], member)
        elseif conc_free(g, this) then
          chosen, info = id, this
          break
        end
      end
      if chosen then
        redis.call('ZREM', KEYS[g + 7], info.k)
        gate_release(g, q, cttl, chosen, info, now, ttl, out)
        room = room - 1
        released = true
        local turn = redis.call('HINCRBY', KEYS[g + 2], 'turn', 1)
        redis.call('PEXPIRE', KEYS[g + 2], ttl)
        if #members == 1 then redis.call('ZREM', KEYS[g + 1], o)
        else redis.call('ZADD', KEYS[g + 1], turn, o) end
      elseif #members == 0 then
        redis.call('ZREM', KEYS[g + 1], o)
      end
    end
    if not released then break end
  end
end

-- Make a job runnable: straight to the broker when nothing is held and there is room, else held (or delayed
-- `delay` ms) and the pump run. `info` nil: what the gate knows of the job from before (a re-admission).
-- Returns false when the gate knows nothing of the job (the caller publishes it as it is). A job already held,
-- delayed or in flight is left as it is: applied twice, an admission changes nothing more.
local function gate_admit(g, q, cttl, id, info, delay, now, cap, ttl, out)
  local raw = redis.call('HGET', KEYS[g], id)
  if raw then
    local was = cjson.decode(raw)
    if was.t ~= 'x' then return true end
    info = was
  end
  if not info then return false end
  if delay > 0 then
    info.t = 'd'
    gate_put(g, id, info, ttl)
    redis.call('ZADD', KEYS[g + 4], now + delay, id)
    redis.call('PEXPIRE', KEYS[g + 4], ttl)
  elseif redis.call('ZCARD', KEYS[g + 1]) == 0 and redis.call('ZCARD', KEYS[g + 3]) < cap and conc_free(g, info) then
    gate_release(g, q, cttl, id, info, now, ttl, out)
  else
    gate_hold(g, id, info, ttl)
    gate_pump(g, q, cttl, now, cap, ttl, out)
  end
  return true
end

-- The job leaves the gate's count: its run ended, parked or went back. `final`: the gate forgets it.
local function gate_leave(g, id, final, ttl)
  local raw = redis.call('HGET', KEYS[g], id)
  if not raw then return end
  local info = cjson.decode(raw)
  if info.t == 'f' then
    redis.call('ZREM', KEYS[g + 3], id)
    if info.c ~= '' and tonumber(redis.call('HINCRBY', KEYS[g + 8], info.c, -1)) <= 0 then
      redis.call('HDEL', KEYS[g + 8], info.c)
    end
  elseif info.t == 'h' then
    redis.call('ZREM', KEYS[g + 7], info.k)
  elseif info.t == 'd' then
    redis.call('ZREM', KEYS[g + 4], id)
  end
  if final then
    redis.call('HDEL', KEYS[g], id)
  elseif info.t ~= 'x' then
    info.t = 'x'
    gate_put(g, id, info, ttl)
  end
end
