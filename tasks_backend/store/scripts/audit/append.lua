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
local function later(a, b)  -- stream ids `ms-seq`: is a after b?
  local am, as = string.match(a, '^(%d+)-(%d+)$$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$$')
  if tonumber(am) ~= tonumber(bm) then return tonumber(am) > tonumber(bm) end
  return tonumber(as) > tonumber(bs)
end
local wanted = '*'
if ARGV[4] ~= '' and string.match(ARGV[4], '^%d+-%d+$$') and (not last or later(ARGV[4], last[1])) then
  wanted = ARGV[4]
end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], wanted, 'uid', ARGV[1], unpack(ARGV, 5))
redis.call('XTRIM', KEYS[1], 'MINID', ms(now - retention))
redis.call('PEXPIRE', KEYS[1], ms(retention))
return id
