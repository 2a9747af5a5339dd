-- KEYS: 1 the job hash, 2 the job's remote tasks (hash: step name -> reference JSON); one hash tag, the job's.
-- ARGV: step name, reference JSON ('' removes the step's entry).
-- Keeps the reference of a remote task the job created, apart from its steps (which a finished job drops),
-- so that a job cancelled while a remote task runs can still have it cancelled. The hash expires with the
-- job. Applied twice, the second run writes (or removes) the same. Returns 1, or 0 when the job is gone.

local h = redis.call('HMGET', KEYS[1], 'created', 'ttl')
if not h[1] then return 0 end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[2], ARGV[1])
  return 1
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('PEXPIREAT', KEYS[2], tonumber(h[1]) + tonumber(h[2]))
return 1
