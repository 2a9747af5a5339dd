-- KEYS: as lib/gate.lua's (the gate's keys from g; the broker queue at q, its counter q+1, its bypass list q+2 and
--       that list's counter q+3).
-- ARGV: none read; callers pass the values.
-- The dispatch gate's rules (see lib/gate.lua for its data): jobs set aside on a full concurrency value and put
-- back, the pump that releases held jobs owner by owner, a job's admission (with a lone owner's bypass, and its end
-- in lib/gate_bypass.lua) and its leave. Comes after lib/gate.lua and lib/gate_bypass.lua on a script's Uses line.

-- A held job set aside while its concurrency value is full: its member in `ready`, moved out of its owner's range
-- to '~<value>:<member>' (an owner's and a value's names in the gate are hex, so these sort after every owner's).
local function aside(c, member)
  return '~' .. c .. ':' .. member
end

-- The job a set-aside member names, when it still waits (else the member is dropped): its id and entry.
local function set_aside_job(g, set, c)
  local member = string.sub(set, #c + 3)
  local id = string.match(member, '^[^:]*:%d:%d+:(.*)')
  local raw = id and redis.call('HGET', KEYS[g], id)
  local info = raw and gate_info(raw)
  if info and info.t == 'h' then return id, info end
  redis.call('ZREM', KEYS[g + 7], set)
  return nil
end

-- An owner's first held job whose concurrency value has room. Those ahead of it that wait on a full value are set
-- aside (`aside`: put back when a job of their value leaves flight), so that a later read starts past them, while
-- `budget` allows (a table shared by one pump's calls: `budget.n` left); past it they are only passed over. Stale
-- members are dropped. Reads `n`, then 50 at a time while it sets aside all it reads (at most 20 reads). Returns the
-- job's id and entry (nil: none), how many of the owner's jobs stay queued in what was read, the job's own included
-- (one more when there may be more than were read), and its member in `ready`, for the caller to drop if it sends
-- the job (its own, or the one it was set aside as).
local function gate_first(g, o, n, budget)
  for _ = 1, 20 do
    local members = redis.call('ZRANGEBYLEX', KEYS[g + 7], '[' .. o .. ':', '(' .. o .. ';', 'LIMIT', 0, n)
    local more, passed = (#members == n) and 1 or 0, 0
    for i, member in ipairs(members) do
      local id = string.sub(member, #o + 18)  -- after '<owner>:<digit>:<13 digits>:'
      local raw = redis.call('HGET', KEYS[g], id)
      local this = raw and gate_info(raw)
      if not this or this.t ~= 'h' then
        redis.call('ZREM', KEYS[g + 7], member)
      elseif conc_free(g, this) then
        if this.c ~= '' then  -- one of the owner's own set aside on this value came first: it goes
          local earlier = redis.call('ZRANGEBYLEX', KEYS[g + 7], '[' .. aside(this.c, o .. ':'),
            '(' .. aside(this.c, o .. ';'), 'LIMIT', 0, 1)[1]
          if earlier and string.sub(earlier, #this.c + 3) < member then
            local eid, einfo = set_aside_job(g, earlier, this.c)
            if eid then return eid, einfo, passed + #members - i + 2 + more, earlier end
          end
        end
        return id, this, passed + #members - i + 1 + more, member
      elseif budget.n > 0 then
        redis.call('ZREM', KEYS[g + 7], member)
        redis.call('ZADD', KEYS[g + 7], 0, aside(this.c, member))
        budget.n = budget.n - 1
      else
        passed = passed + 1
      end
    end
    if passed > 0 or more == 0 then return nil, nil, passed + more end
    n = 50
  end
  return nil, nil, 1
end

-- Value `c` has room (a job of it left flight, or a held one left the gate): one job set aside on `c` goes back to
-- its place in its owner's queue (its sequence kept, its owner in the ring), taking the owners waiting on `c` in
-- turn (the field 'a<value>' of `turns` names the owner served last; dropped once none waits), each owner's first.
-- `check`: only if `c` has room by the job's own max. Stale members are dropped on the way. `q`: the broker
-- queue's place in KEYS, as gate_release's (a job put back ends a bypass: gate_bypass_end).
local function gate_restore(g, q, c, ttl, check)
  local field, hi = 'a' .. c, '(~' .. c .. ';'
  local last = redis.call('HGET', KEYS[g + 2], field)
  local from = '[' .. aside(c, last and (last .. ';') or '')
  local wrapped = not last
  for _ = 1, 64 do
    local first = redis.call('ZRANGEBYLEX', KEYS[g + 7], from, hi, 'LIMIT', 0, 1)[1]
    if not first then
      if wrapped then
        if last then redis.call('HDEL', KEYS[g + 2], field) end
        return
      end
      from, wrapped = '[' .. aside(c, ''), true
    else
      local id, info = set_aside_job(g, first, c)
      if id then
        if check and not conc_free(g, info) then return end
        redis.call('ZREM', KEYS[g + 7], first)
        gate_bypass_end(g, q, ttl)
        gate_hold(g, id, info, ttl)
        redis.call('HSET', KEYS[g + 2], field, info.o)
        return
      end
    end
  end
end

-- The tick's: up to `n` values with jobs set aside, from where the last tick stopped (`aside` in `turns`), each
-- given one job back when it has room (a value freed by a path that put none back: a job of it lost with its
-- count's key, a process before this code).
local function gate_restore_free(g, q, ttl, n)
  local last = redis.call('HGET', KEYS[g + 2], 'aside')
  local from = last and ('[~' .. last .. ';') or '[~'
  local wrapped, seen = not last, {}
  for _ = 1, n do
    local set = redis.call('ZRANGEBYLEX', KEYS[g + 7], from, '+', 'LIMIT', 0, 1)[1]
    if not set then
      if wrapped then break end
      from, wrapped = '[~', true
    else
      local c = string.match(set, '^~([^:]*):')
      if seen[c] then break end  -- round once
      seen[c] = true
      -- Only a value with nothing in flight: one with a job put back and not yet sent shows room too.
      if not redis.call('HGET', KEYS[g + 8], c) then gate_restore(g, q, c, ttl, true) end
      from, last = '[~' .. c .. ';', c
    end
  end
  if last then redis.call('HSET', KEYS[g + 2], 'aside', last) end
end

-- `due`: delayed jobs now due join their owners' queues first, and jobs set aside on a value that has room go back
-- (the pump's tick; admissions and leaves leave them to it). Then held jobs are released while there is room, one
-- per owner per turn, each owner's first job whose concurrency value has room (`gate_first`).
-- `flying`: how many are in flight, when the caller knows.
local function gate_pump(g, q, cttl, now, cap, ttl, out, due, flying)
  if due then
    local ids = redis.call('ZRANGEBYSCORE', KEYS[g + 4], '-inf', now, 'LIMIT', 0, 500)
    if #ids > 0 then gate_bypass_end(g, q, ttl) end
    for _, id in ipairs(ids) do
      redis.call('ZREM', KEYS[g + 4], id)
      local raw = redis.call('HGET', KEYS[g], id)
      if raw then gate_hold(g, id, gate_info(raw), ttl) end
    end
    gate_restore_free(g, q, ttl, 20)
  end
  flying = flying or redis.call('ZCARD', KEYS[g + 3])
  local rounds, from, bo = 0, 0, nil
  local budget, none = {n = 1000}, {n = 0}  -- jobs set aside in this call, at most
  while flying < cap and rounds < 1000 do
    rounds = rounds + 1
    local released, dropped = false, 0
    local ring = redis.call('ZRANGE', KEYS[g + 1], from, from + 63, 'WITHSCORES')
    if bo == nil and #ring > 0 then bo = q and redis.call('HGET', KEYS[g + 2], 'bo') or false end
    for i = 1, #ring, 2 do
      local o = ring[i]
      if flying >= cap then break end
      -- Past the first 64 owners, two jobs deep and none set aside: a bound on the call's work.
      local chosen, info, queued, member = gate_first(g, o, 2, from == 0 and budget or none)
      local moved, counted, listed = false, false, 0
      if o == bo then moved, counted, listed = gate_backlog(g, q, cttl, now, ttl, flying, chosen and info) end
      queued = queued + listed  -- jobs in the bypass list keep the owner in the ring
      if moved then
        chosen = nil  -- it stays held, in its place
        if counted then flying = flying + 1 end
      elseif chosen then
        redis.call('ZREM', KEYS[g + 7], member)
        gate_release(g, q, cttl, chosen, info, now, ttl, out, flying, false)
        flying = flying + 1
      end
      if moved or chosen then
        released = true
        if queued == 1 then
          redis.call('ZREM', KEYS[g + 1], o)
          -- A turn was taken all the same: newcomers from now on go behind those it passed.
          if #ring > 2 or from > 0 then redis.call('HINCRBY', KEYS[g + 2], 'turn', 1) end
        elseif #ring > 2 or from > 0 then
          redis.call('ZADD', KEYS[g + 1], redis.call('HINCRBY', KEYS[g + 2], 'turn', 1), o)
        else  -- an owner alone in the ring keeps its score (its flood takes no turns), served now: not passed
          local at = tonumber(ring[i + 1])
          if at - math.floor(at) == 0.25 then redis.call('ZADD', KEYS[g + 1], math.floor(at), o) end
        end
      elseif queued == 0 then
        redis.call('ZREM', KEYS[g + 1], o)
        dropped = dropped + 1
      end
    end
    -- When every owner read waits on a full concurrency value (each keeps its place), the next 64, so that owners
    -- behind them are not held while slots are free (up to 1,024 owners a call, each past the first 64 read two
    -- jobs deep: a bound on the call's work). The owners passed stay stuck for the rest of the call: a release
    -- never frees a value.
    if not released then
      if #ring < 128 or from >= 960 then break end
      from = from + 64 - dropped
    end
  end
end

-- Make a job runnable: straight to the broker when nothing is held and there is room, else held (or delayed
-- `delay` ms) and the pump run. `info` nil: what the gate knows of the job from before (a re-admission, whose
-- message `msg` the caller passes again). Returns false when the gate knows nothing of the job (the caller
-- publishes it as it is). A job already held, delayed, in flight or bypassed is left as it is: applied twice, an
-- admission changes nothing more.
-- The bypass: while one owner alone has jobs queued (nothing held), at one priority, with no concurrency limit,
-- and the gate pushes to a broker queue in this Redis, its new jobs past the slots go to the bypass list at once
-- (KEYS[q + 2]: the queue's priority-9 list in Celery's Redis transport, which a worker reads when the queue's own
-- list is empty) with a small entry ('b': no message kept, not counted in flight), much as with fair shares off:
-- such a job then costs the gate nothing more when its run ends. A re-admission (a retry, a resume) is held or
-- sent as before (applied twice, a bypass would push twice). The first job that needs the gate again (another
-- owner's, another priority, a concurrency limit, a delayed job now due, a job put back) ends the bypass
-- (gate_bypass_end): what the gate sends from then on goes to the queue's own list, read first, and the bypass
-- owner takes turns with the others from its bypass list (gate_backlog), as if those jobs had been held.
-- `fresh`: the job was made by this very call, so the gate cannot know it yet (its entry is not read); `by`: the
-- bypass as gate_cap read it in this call (nil: read here).
local function gate_admit(g, q, cttl, id, info, delay, now, cap, ttl, out, msg, fresh, by)
  local raw = not fresh and redis.call('HGET', KEYS[g], id)
  if raw then
    info = gate_info(raw)
    if info.t ~= 'x' then return true end
    if info.x == '' then info.x = msg or '' end
  end
  if not info then return false end
  if delay > 0 then
    info.t = 'd'
    gate_put(g, id, info, ttl, true)
    redis.call('ZADD', KEYS[g + 4], now + delay, id)
    redis.call('PEXPIRE', KEYS[g + 4], ttl)
    return true
  end
  local plain = q and info.c == '' and string.sub(info.x, 1, 1) == '{'
  by = plain and (by or redis.call('HMGET', KEYS[g + 2], 'bo', 'bp'))
  local mine = plain and (not by[1] or (by[1] == info.o and string.byte(by[2]) - 48 == info.p))  -- one digit
  if not mine and gate_bypass_end(g, q, ttl) and plain then mine, by = true, {false} end  -- that bypass was over
  -- Jobs in flight are counted where the count decides: not for a bypass under way, which takes the owner's job.
  local flying = -1
  if not (mine and not raw and by[1]) then flying = redis.call('ZCARD', KEYS[g + 3]) end
  -- Once a bypass began, the owner's new jobs follow the earlier ones into the list even while there is room
  -- (jobs run from the list are not counted in flight): sent to the queue's own list, they would go ahead of them.
  if mine and not raw and (by[1] or flying >= cap) and redis.call('ZCARD', KEYS[g + 1]) == 0 then
    local message = info.x
    info.t = 'b'
    info.s = redis.call('HINCRBY', KEYS[g + 2], 'seq', '1')  -- its place among the owner's, should it meet held ones
    gate_put(g, id, info, ttl, true)
    push_counted(q, message, cttl, ttl, true)
    if not by[1] then
      redis.call('HSET', KEYS[g + 2], 'bo', info.o, 'bp', info.p)
      redis.call('PEXPIRE', KEYS[g + 2], ttl)
    end
    return true
  end
  if flying < 0 then flying = redis.call('ZCARD', KEYS[g + 3]) end
  local room = conc_free(g, info)
  -- Jobs set aside on a value that has room (a value freed by a path that put none back) go first.
  if room and info.c ~= '' then gate_restore(g, q, info.c, ttl, true) end
  if flying < cap and room and redis.call('ZCARD', KEYS[g + 1]) == 0 then
    gate_release(g, q, cttl, id, info, now, ttl, out, flying, true)
  else
    gate_hold(g, id, info, ttl)
    gate_pump(g, q, cttl, now, cap, ttl, out, false, flying)
  end
  return true
end

-- The job leaves the gate's count: its run ended, parked or went back. `final`: the gate forgets it. `q` as
-- gate_restore's. `waiting`: only a job that waits (held, delayed, parked) leaves; one sent to a worker ('f', 'b')
-- is 'kept' for its run's end to leave (a cancel: its code may run on until its next cancellation point, and its
-- concurrency value stays full until then). `seen` (Redis ms, by the gate's clock; nil: none), for a leave that is
-- not final: the caller saw the job parked at that time, so an admission since (an answer, a wake) is 'kept': held
-- or delayed, or in flight since `seen` (the same millisecond included: a job admitted again before the caller
-- looked would not have looked parked). Returns where the job was (nil: unknown): a bypassed job ('b') made
-- no room in flight.
local function gate_leave(g, q, id, final, ttl, waiting, seen)
  local raw = redis.call('HGET', KEYS[g], id)
  if not raw then return nil end
  local info = gate_info(raw)
  local was = info.t
  if waiting and (was == 'f' or was == 'b') then return 'kept' end
  if seen and not final then
    if was == 'h' or was == 'd' then return 'kept' end
    if was == 'f' and tonumber(redis.call('ZSCORE', KEYS[g + 3], id) or 0) >= seen then return 'kept' end
  end
  if info.t == 'f' then
    redis.call('ZREM', KEYS[g + 3], id)
    if info.c ~= '' then
      if tonumber(redis.call('HINCRBY', KEYS[g + 8], info.c, -1)) <= 0 then redis.call('HDEL', KEYS[g + 8], info.c) end
      gate_restore(g, q, info.c, ttl, true)
    end
  elseif info.t == 'h' then
    local member = gate_member(id, info)
    if info.c == '' then redis.call('ZREM', KEYS[g + 7], member)
    else
      redis.call('ZREM', KEYS[g + 7], member, aside(info.c, member))
      if conc_free(g, info) then gate_restore(g, q, info.c, ttl, true) end  -- it may have been put back for that room
    end
  elseif info.t == 'd' then
    redis.call('ZREM', KEYS[g + 4], id)
  end
  if final then
    redis.call('HDEL', KEYS[g], id)
  elseif info.t ~= 'x' then
    info.t = 'x'
    gate_put(g, id, info, ttl, false)
  end
  return was
end
