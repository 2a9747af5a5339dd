-- KEYS: 1 the job hash, 2 its feed.
-- ARGV: from index `at`: request id, ttl ms, then the new record's name/value pairs (state first) to the end.
-- Sets `created` and `updated` from Redis's clock (`t`: a TIME reply, or nil) and returns that time and true (the
-- replay of its own request returns the same time alone: the job was made before); false if another request made it.

local function create_job(at, t)
  local rid = ARGV[at]
  local prev = redis.call('HMGET', KEYS[1], 'rq', 'created')
  if prev[2] then
    if replayed(prev[1], rid) then return prev[2] end
    return false
  end
  local at_ms = clock(t)
  local now = ms(at_ms)
  redis.call('HSET', KEYS[1], 'created', now, 'updated', now, 'rq', rid .. ' ', unpack(ARGV, at + 2))
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', '128', '*', 's', ARGV[at + 3], 'u', now)
  -- Written once as an integer: a number handed to redis.call is printed as a float on every call.
  local exp = ms(at_ms + tonumber(ARGV[at + 1]))
  redis.call('PEXPIREAT', KEYS[1], exp)
  redis.call('PEXPIREAT', KEYS[2], exp)
  return now, true
end
