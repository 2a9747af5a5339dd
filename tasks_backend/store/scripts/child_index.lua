-- KEYS: 1 the parent's job hash, 2 the parent's children (sorted set); one hash tag, the parent's.
-- ARGV: child job id.
-- Adds the child to its parent's index, scored by Redis's time of the first add (ZADD NX: applied twice, the
-- child keeps its place). The index expires with the parent. Returns the parent's state and when it ends (Redis ms),
-- both read in the same call: a cancel of the parent that read the index before the child was in it is told from
-- one after, and so is a lengthening of the parent's life (`adopt.lua`) that read the index before; false when the
-- parent is gone.

local h = redis.call('HMGET', KEYS[1], 'created', 'ttl', 'state')
if not h[1] then return false end
local ends = ms(tonumber(h[1]) + tonumber(h[2]))
redis.call('ZADD', KEYS[2], 'NX', string.format('%.3f', clock(nil, true)), ARGV[1])
redis.call('PEXPIREAT', KEYS[2], ends)
return {h[3], ends}
