-- KEYS: 1 one audit stream (the whole system's, one job's or one owner's).
-- ARGV: 1 entry uid, 2 retention (ms), 3 length cap, 4 the entry id to use ('' or not later than the stream's
-- newest: Redis's time), then the entry's field/value pairs.
-- Appends one entry (its id: Redis's time), drops the entries older than the retention (exactly, so nothing
-- past it is ever read back), caps the length (roughly: whole nodes, cheap) and keeps the stream alive for the
-- retention. Applied twice, the second run finds its uid on the newest entry and answers that entry's id.
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
if last then
  local f = last[2]
  for i = 1, #f, 2 do
    if f[i] == 'uid' and f[i + 1] == ARGV[1] then return last[1] end
  end
end
local retention = tonumber(ARGV[2])
local now = clock()
local function parts(id)  -- a stream id `ms-seq` as two numbers (nil when it is not one)
  local m, s = string.match(id, '^(%d+)-(%d+)')
  if m and m .. '-' .. s == id then return tonumber(m), tonumber(s) end
end
local function later(a, b)  -- is stream id a after stream id b?
  local am, as = parts(a)
  local bm, bs = parts(b)
  if am ~= bm then return am > bm end
  return as > bs
end
local wanted = '*'
if ARGV[4] ~= '' and parts(ARGV[4]) and (not last or later(ARGV[4], last[1])) then
  wanted = ARGV[4]
end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], wanted, 'uid', ARGV[1], unpack(ARGV, 5))
redis.call('XTRIM', KEYS[1], 'MINID', ms(now - retention))
redis.call('PEXPIRE', KEYS[1], ms(retention))
return id
