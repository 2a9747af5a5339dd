-- KEYS: 1 the due set (sorted set: schedule member -> next run ms), 2 the taken entries (hash: member ->
--       '<first taken ms> <lease end ms>'), 3 this request's reply (string).
-- ARGV: limit, lease ms, the due set's ttl ms.
-- Takes up to `limit` due schedules for one ticker: each is moved `lease` ms ahead, so that another ticker leaves it
-- alone unless this one dies. Returns {now, the earliest entry left (ms, or '' if none), then per schedule taken:
-- member, when a ticker first took it for this run (ms), and the end of the lease that lapsed ('' if none)}.
-- An entry taken again when its lease lapsed keeps its first taking: the ticks that fell while a dead ticker held
-- it were seen in time, and are not missed. Applied twice (a lost reply) it answers the first reply, kept as
-- long as the lease it gave: the second taking would find those entries leased, and leave them to lapse.
-- The ticker's passes keep the due set alive: only a definition or a resume sets its TTL otherwise, and schedules
-- that tick for longer than the TTL without either would stop. Renewed as `keep` renews (no write per pass).

local kept = redis.call('GET', KEYS[3])
if kept then return cjson.decode(kept) end
local now = clock()
local lease = tonumber(ARGV[2])
local till = ms(now + lease)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, ARGV[1])
local out = {}
for i = 1, #due, 2 do
  local member, score = due[i], tonumber(due[i + 1])
  local first, lapsed = ms(now), ''
  local held = redis.call('HGET', KEYS[2], member)
  if held then
    local cut = string.find(held, ' ', 1, true)
    if cut and tonumber(string.sub(held, cut + 1)) == score then
      first, lapsed = string.sub(held, 1, cut - 1), string.sub(held, cut + 1)
    end
  end
  redis.call('ZADD', KEYS[1], till, member)
  redis.call('HSET', KEYS[2], member, first .. ' ' .. till)
  table.insert(out, member)
  table.insert(out, first)
  table.insert(out, lapsed)
end
keep(1, ARGV[3])
keep(2, ARGV[3])
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
table.insert(out, 1, first[2] or '')
table.insert(out, 1, ms(now))
if #due > 0 then redis.call('SET', KEYS[3], cjson.encode(out), 'PX', ms(lease)) end
return out
