-- KEYS: the gate's keys (`Keys.gate_keys`), then the broker queue, its push counter, its bypass list and that list's
--       push counter when the broker is this Redis.
-- ARGV: fallback slots, fair shares ('1'/'0'), key ttl ms, push counter ttl ms ('' = leave it), then a worker's
--       name ('' = none), its slots (0: it stops), how long they count (ms).
-- A worker publishes its slots (workers gone quiet are dropped); on a publish or a drop the slot total is counted
-- again from the live workers (a worker that died leaves it here, or at the first call after its publish expired)
-- and every gate key's TTL is renewed. Then the pump runs: delayed jobs now due join their owners' queues and held jobs are released
-- into any room (lib/gate.lua). Returns {now, when the next delayed job is due ('' = none), released id, message
-- or operation, ...}. Applied twice: the same slots, and a pump that finds nothing more to do.
-- Uses: gate gate_bypass gate_pump

local now = clock()
local ttl = tonumber(ARGV[3])
local q = nil
if #KEYS > 9 then q = 10 end
local gone = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', '(' .. now)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', '(' .. now)
  redis.call('HDEL', KEYS[7], unpack(gone))
end
if ARGV[5] ~= '' then
  if tonumber(ARGV[6]) > 0 then
    redis.call('ZADD', KEYS[6], now + tonumber(ARGV[7]), ARGV[5])
    redis.call('HSET', KEYS[7], ARGV[5], ARGV[6])
  else
    redis.call('ZREM', KEYS[6], ARGV[5])
    redis.call('HDEL', KEYS[7], ARGV[5])
  end
end
local cap
if #gone > 0 or ARGV[5] ~= '' then
  gate_keep(1, ttl)
  cap = gate_recount(1, now, ttl)
  if ARGV[2] ~= '1' then cap = 1e12 elseif cap < 0 then cap = tonumber(ARGV[1]) end
else
  cap = gate_cap(1, now, ARGV[1], ARGV[2], ttl)
end
local out = {}
gate_pump(1, q, ARGV[4], now, cap, ttl, out, true)
local next_due = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
return {ms(now), next_due[2] or '', unpack(out)}
