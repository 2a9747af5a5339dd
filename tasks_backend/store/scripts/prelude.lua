-- KEYS: none of its own (a function that touches a key takes it from its caller's KEYS).
-- ARGV: none of its own.
-- The start of every script: Redis's clock, integers as Redis stores them, and the replay record of a request.
-- State names are written as placeholders (a dollar sign and the state's Python name, or TERMINAL, CANCELLABLE,
-- CLAIMABLE for sets) in every script, and rendered from the state table (see `scripts.state_names`).

-- Redis's time in ms; `t` a TIME reply already read in this script, if any. `fine`: keep the microseconds, as a
-- fraction of a ms (an owner index orders one client's quick submissions in the order made).
local function clock(t, fine)
  t = t or redis.call('TIME')
  local s, us = t.s, t.us
  if not s then  -- parsed once per reply: a script asks for its time at every step, and tonumber is not cheap
    s, us = tonumber(t[1]), tonumber(t[2])
    t.s, t.us = s, us
  end
  if fine then return s * 1000 + us / 1000 end
  return s * 1000 + math.floor(us / 1000)
end

-- Redis's time in microseconds (the rate limits count in them); `t` as for clock().
local function clock_us(t)
  t = t or redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Integers as Redis stores them (tostring would print large numbers in exponent form).
local function ms(x)
  return string.format('%d', x)
end

-- A long-lived key that calls keep writing (an owner's index, a schedule, the gate's jobs) is left at least `ttl` ms
-- (a number, or a string as ARGV passes it) to live: once below, it is given an eighth more than `ttl`, so that most
-- calls pay a read and only about one in that eighth of the time a write, which the AOF and replicas get as well.
-- A key without a TTL (PTTL -1: made by this call) gets one at once.
local function keep(k, ttl)
  ttl = tonumber(ttl)
  if redis.call('PTTL', KEYS[k]) < ttl then redis.call('PEXPIRE', KEYS[k], ms(ttl + math.floor(ttl / 8))) end
end

local function in_csv(value, csv)
  return string.find(',' .. csv .. ',', ',' .. value .. ',', 1, true) ~= nil
end

-- The reply remembered for request `rid` in `rq` ('<request id> <reply>'), or nil for another request.
local function replayed(rq, rid)
  if not rq or rid == '' then return nil end
  if string.sub(rq, 1, #rid + 1) == rid .. ' ' then return string.sub(rq, #rid + 2) end
  return nil
end
