-- KEYS: 1 a schedule.
-- ARGV: (member, score seen, new score or '' to remove) triples.
-- A member whose score changed since it was read (someone scheduled it again meanwhile) is left as it is: that
-- newer entry wins. Returns how many triples it looked at.

for i = 1, #ARGV, 3 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    if ARGV[i + 2] == '' then
      redis.call('ZREM', KEYS[1], ARGV[i])
    else
      redis.call('ZADD', KEYS[1], ARGV[i + 2], ARGV[i])
    end
  end
end
return #ARGV / 3
