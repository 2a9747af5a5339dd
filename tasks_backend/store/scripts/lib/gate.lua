-- KEYS: from position g (the caller's), the gate's keys in `Keys.gate_keys` order (g jobs, g+1 ring, g+2 turns,
--       g+3 flight, g+4 delayed, g+5 workers, g+6 slots, g+7 ready, g+8 conc); with `q` (nil: the caller publishes)
--       the broker queue at q, its counter q+1, its bypass list q+2 and that list's counter q+3 (this Redis).
-- ARGV: none read; callers pass the values.
-- The dispatch gate: a job's message goes to the broker only while fewer than `cap` are in flight (sent and not
-- finished); the others are held in `ready` (members '<owner>:<9 - priority>:<sequence>:<id>', all scored 0,
-- so an owner's jobs sort by priority, then submission), and released owner by owner in turn (the ring: the
-- owner served longest ago first); a held job met while its concurrency value is full is set aside in `ready` as
-- '~<value>:<member>' until a job of that value ends. `conc` counts the jobs in flight per concurrency value. A
-- job's entry in `jobs` is one string, 't|p|m|s|o|c|x' (no JSON to decode and encode on every call): t where it
-- is (h held, d delayed, f in flight, x out: parked, between runs), p priority, m the concurrency max, s its
-- sequence in `ready` ('' before its first hold; kept across re-admissions), o owner, c concurrency value ('' none),
-- x the message or operation, kept only while held or delayed (a re-admission passes it again).
-- The slot total is cached in `turns` ('cap', -1: no worker published; 'capu': until when, the earliest expiry
-- of a live worker's publish), so a call reads one hash, and recounts only when a publish expired.
-- This file holds the entries, the slots, the ring and a hold or a release; lib/gate_bypass.lua a lone owner's bypass;
-- lib/gate_pump.lua the rules (put-backs, the pump, an admission, a leave), after both on a script's Uses line.

-- Pushes `msg` onto the broker queue at KEYS[q] and counts it at KEYS[q + 1] (`b`: onto the bypass list at
-- KEYS[q + 2], counted at KEYS[q + 3]; `msg` nil: the message is there already, only counted). `cttl`: the
-- counter's TTL when this caller is due to renew it, else ''; a counter the push makes (it expired, or never was)
-- gets `floor` at once, so that it never lives without one until a renewal lengthens it.
local function push_counted(q, msg, cttl, floor, b)
  local list = b and q + 2 or q
  if msg then redis.call('LPUSH', KEYS[list], msg) end
  if redis.call('INCR', KEYS[list + 1]) == 1 and cttl == '' then cttl = floor end
  if cttl ~= '' then redis.call('PEXPIRE', KEYS[list + 1], cttl) end
end

-- A delay as callers pass it: ms from now, or '@' and an absolute time (Redis ms).
local function gate_delay(spec, now)
  if spec == '0' then return 0 end  -- the usual case, without parsing it
  if string.sub(spec, 1, 1) == '@' then return tonumber(string.sub(spec, 2)) - now end
  return tonumber(spec)
end

local function gate_info(raw)
  if string.sub(raw, 1, 1) == '{' then  -- an entry written as JSON, before entries were strings
    local j = cjson.decode(raw)
    local s = j.k and string.match(j.k, '^[^:]*:%d:(%d+):') or ''
    return {t = j.t, p = tonumber(j.p), m = tonumber(j.m) or 0, s = s, o = j.o, c = j.c or '', x = j.x or ''}
  end
  -- 't|p|' are a character each; the rest is split at its next four bars by a plain search (a pattern's captures
  -- would walk the message, most of the entry, character by character) and the digit read as a byte (tonumber
  -- parses a string twice).
  local parts, from = {}, 5
  for i = 1, 4 do
    local bar = string.find(raw, '|', from, true)
    parts[i] = string.sub(raw, from, bar - 1)
    from = bar + 1
  end
  local m = parts[1]
  if m == '' or m == '0' then m = 0 else m = tonumber(m) end
  return {t = string.sub(raw, 1, 1), p = string.byte(raw, 3) - 48, m = m, s = parts[2], o = parts[3], c = parts[4],
          x = string.sub(raw, from)}
end

local function gate_member(id, info)
  return string.format('%s:%d:%013d:%s', info.o, 9 - info.p, tonumber(info.s), id)
end

-- `fresh`: the entry may be new (and the hash with it): its TTL is set. Numbers are written with ms(): Lua would
-- print them as floats (a costly format on every submit, and an exponent past 14 digits).
local function gate_put(g, id, info, ttl, fresh)
  local x = ''
  if info.t == 'h' or info.t == 'd' then x = info.x end
  local s = info.s
  if type(s) == 'number' then s = ms(s) end
  -- The priority is one digit, and the max most often 0: neither needs a format.
  local m = info.m == 0 and '0' or ms(info.m)
  redis.call('HSET', KEYS[g], id, table.concat({info.t, string.char(48 + info.p), m, s, info.o, info.c, x}, '|'))
  if fresh then keep(g, ttl) end
end

-- The live workers' slots, counted again and cached; -1 when none published.
local function gate_recount(g, now, ttl)
  local live = redis.call('ZRANGEBYSCORE', KEYS[g + 5], now, '+inf', 'WITHSCORES')
  local total, till = -1, now + ttl
  if #live > 0 then
    local names = {}
    for i = 1, #live, 2 do table.insert(names, live[i]) end
    total = 0
    for _, n in ipairs(redis.call('HMGET', KEYS[g + 6], unpack(names))) do total = total + (tonumber(n) or 0) end
    till = tonumber(live[2])
  end
  redis.call('HSET', KEYS[g + 2], 'cap', total, 'capu', ms(till))
  redis.call('PEXPIRE', KEYS[g + 2], ttl)
  return total
end

-- The worker slots the live workers published (`fallback` when none did); unbounded when fair shares are off. Also
-- the lone owner's bypass as `turns` holds it ({bo, bp}, read in the same call; nil when fair shares are off), for
-- an admission to take instead of reading it again (gate_admit).
local function gate_cap(g, now, fallback, fair, ttl)
  if fair ~= '1' then return 1e12 end
  local c = redis.call('HMGET', KEYS[g + 2], 'cap', 'capu', 'bo', 'bp')
  local cap
  if c[1] and tonumber(c[2]) >= now then cap = tonumber(c[1]) else cap = gate_recount(g, now, ttl) end
  if cap < 0 then cap = tonumber(fallback) end
  return cap, {c[3], c[4]}
end

local function conc_free(g, info)
  if info.c == '' then return true end
  return tonumber(redis.call('HGET', KEYS[g + 8], info.c) or '0') < info.m
end

-- Owner `o` joins the ring (when not in it already).
local function ring_join(g, o, ttl)
  if redis.call('ZSCORE', KEYS[g + 1], o) then return end
  -- A newcomer goes ahead of every owner served since the last turn began (turn - 0.5), and of an owner alone in
  -- the ring (served last, and given no turn for it: see gate_pump), which is marked passed (its score's
  -- fraction .25) until it is served again. Newcomers that come once one of those ahead was served (a turn
  -- taken) or while it is alone and marked go behind it: a stream of owners with a job each cannot keep it
  -- waiting for ever.
  local head = redis.call('ZRANGE', KEYS[g + 1], 0, 1, 'WITHSCORES')
  local score
  if #head == 2 then
    local alone = tonumber(head[2])
    local base = math.floor(alone)
    if alone - base == 0.25 then
      score = base + 0.5
    else
      score = base - 0.5
      redis.call('ZADD', KEYS[g + 1], base + 0.25, head[1])
    end
  else
    score = tonumber(redis.call('HGET', KEYS[g + 2], 'turn') or '0') - 0.5
  end
  redis.call('ZADD', KEYS[g + 1], score, o)
  redis.call('PEXPIRE', KEYS[g + 1], ttl)
end

local function gate_hold(g, id, info, ttl)
  if info.s == '' then
    info.s = redis.call('HINCRBY', KEYS[g + 2], 'seq', 1)
    if info.s == 1 then redis.call('PEXPIRE', KEYS[g + 2], ttl) end  -- made now (the counter is never reset)
  end
  info.t = 'h'
  gate_put(g, id, info, ttl, true)
  redis.call('ZADD', KEYS[g + 7], 0, gate_member(id, info))
  redis.call('PEXPIRE', KEYS[g + 7], ttl)
  ring_join(g, info.o, ttl)
end

-- `flying`: how many were in flight before (0: the set is made again, and given its TTL); `fresh` as gate_put's.
local function gate_release(g, q, cttl, id, info, now, ttl, out, flying, fresh)
  local x = info.x
  info.t = 'f'
  gate_put(g, id, info, ttl, fresh)
  redis.call('ZADD', KEYS[g + 3], now, id)
  if flying == 0 then redis.call('PEXPIRE', KEYS[g + 3], ttl) end
  if info.c ~= '' then
    redis.call('HINCRBY', KEYS[g + 8], info.c, 1)
    redis.call('PEXPIRE', KEYS[g + 8], ttl)
  end
  -- Only a broker message is pushed here: an entry written by a process that publishes through its dispatcher
  -- holds the operation ('' once dropped), which the caller turns into a message or publishes as it is.
  if q and string.sub(x, 1, 1) == '{' then
    push_counted(q, x, cttl, ttl)
  else
    table.insert(out, id); table.insert(out, x)
  end
end

-- Every gate key's TTL renewed (a worker's publish: the hot paths set a TTL only where a key may be made anew), as
-- `keep` renews a key: never set back below what the hot paths keep it at, which would have each of them write it
-- again. A key that is not there is left so.
local function gate_keep(g, ttl)
  for i = g, g + 8 do keep(i, ttl) end
end
