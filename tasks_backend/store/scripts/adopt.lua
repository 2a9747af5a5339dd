-- KEYS: the child's hash, then every other key that ends with it (`Keys.lifetime_keys`; one hash tag, the child's).
-- ARGV: the parent it is taken from ('' = its parent stays), the job taking it over, a time (Redis ms), the longest
--       retention (ms).
-- A child taken over by another job (the rerun that keeps the spawn that made it, `service.rerun`): its `parent`
-- becomes that job if it still is the first one's; and it lives until at least the time given, within the longest
-- retention from its creation: its `ttl` lengthened, never shortened, and every key given that ends with it with
-- it (a key cut shorter, a finished job's feed, stays so). Returns 1 when the child is the taker's, 0 when it is not
-- (another job took it over first, or no taker was given), false when it is gone. Applied twice, the same.

local h = redis.call('HMGET', KEYS[1], 'created', 'ttl', 'parent')
if not h[1] then return false end
local mine = 0
if ARGV[1] ~= '' and (h[3] == ARGV[1] or h[3] == ARGV[2]) then
  redis.call('HSET', KEYS[1], 'parent', ARGV[2])
  mine = 1
end
local created = tonumber(h[1])
local ends, at = created + tonumber(h[2]), math.min(tonumber(ARGV[3]), created + tonumber(ARGV[4]))
if ends < at then
  local now = clock()
  redis.call('HSET', KEYS[1], 'ttl', ms(at - created))
  for i = 1, #KEYS do
    local left = redis.call('PTTL', KEYS[i])
    if left == -1 or (left >= 0 and now + left >= ends - 1000) then redis.call('PEXPIREAT', KEYS[i], ms(at)) end
  end
end
return mine
