-- KEYS: 1 an answer link (hash: job, key, id, until, used).
-- ARGV: request id.
-- Takes the link for one answer: {'ok', job id, key, link id} the first time (and again for the same request id,
-- so a retried use answers the same), else {'used'} | {'expired'} | {'gone'} (revoked, or never made).

local h = redis.call('HMGET', KEYS[1], 'job', 'key', 'id', 'until', 'used')
if not h[1] then return {'gone'} end
if h[5] and h[5] ~= ARGV[1] then return {'used'} end
if not h[5] and tonumber(h[4]) <= clock() then return {'expired'} end
redis.call('HSET', KEYS[1], 'used', ARGV[1])
return {'ok', h[1], h[2], h[3]}
