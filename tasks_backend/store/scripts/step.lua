-- KEYS: job, feed, steps, answers.
-- ARGV: token, step name, JSON value.
-- Returns {outcome, value}: ok | exists | fenced | cancelled; a replay finds its own value and answers 'exists'
-- with it, which the caller reads the same way.
-- Uses: job

local h = redis.call('HMGET', KEYS[1], 'state', 'token', 'ctok')
local s = standing(h[1], h[2], h[3], ARGV[1])
if s == $CANCELLED then return {$CANCELLED, ''} end
if s ~= 'ok' then return {'fenced', ''} end
if redis.call('HSETNX', KEYS[3], ARGV[2], ARGV[3]) == 0 then
  return {'exists', redis.call('HGET', KEYS[3], ARGV[2])}
end
redis.call('HSET', KEYS[1], 'ckpt', '1', 'lstep', ARGV[2])
redis.call('PEXPIREAT', KEYS[3], expiry())
return {'ok', ARGV[3]}
