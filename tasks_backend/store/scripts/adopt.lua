-- KEYS: the child's hash, then every other key that ends with it (`Keys.lifetime_keys`; one hash tag, the child's).
-- ARGV: the id of the job taking it over, the time that job ends (Redis ms).
-- A child taken over by another job (the rerun that keeps the spawn that made it, `service.rerun`): its `parent`
-- becomes that job, and it lives at least as long: its retention (`ttl`) is lengthened so that it ends then, and
-- every key given with it; never shortened. Returns true, or false when the child is gone. Applied twice, the same.

local h = redis.call('HMGET', KEYS[1], 'created', 'ttl')
if not h[1] then return false end
redis.call('HSET', KEYS[1], 'parent', ARGV[1])
local created, at = tonumber(h[1]), tonumber(ARGV[2])
if created + tonumber(h[2]) < at then
  redis.call('HSET', KEYS[1], 'ttl', ms(at - created))
  for i = 1, #KEYS do redis.call('PEXPIREAT', KEYS[i], ms(at)) end
end
return true
