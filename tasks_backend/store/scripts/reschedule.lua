-- KEYS: 1 a schedule, 2 (the schedules' due set's only) the entries tickers took (hash: member -> see
--       schedules/take.lua), if any.
-- ARGV: (member, score seen, new score or '' to remove) triples.
-- A member whose score changed since it was read (someone scheduled it again meanwhile) is left as it is: that
-- newer entry wins (and its taken record, which names a lease that no longer matches, is ignored by the next take).
-- A member set or removed is no longer taken. Returns how many triples it looked at. Applied twice, the second finds
-- the scores changed and changes nothing.

local gone = {}
for i = 1, #ARGV, 3 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    if ARGV[i + 2] == '' then
      redis.call('ZREM', KEYS[1], ARGV[i])
    else
      redis.call('ZADD', KEYS[1], ARGV[i + 2], ARGV[i])
    end
    table.insert(gone, ARGV[i])
  end
end
if KEYS[2] and #gone > 0 then redis.call('HDEL', KEYS[2], unpack(gone)) end
return #ARGV / 3
