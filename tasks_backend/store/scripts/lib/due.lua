-- KEYS: KEYS[kd] the schedules' due set (member -> next run ms), KEYS[kt] the entries tickers took; positions given
--       by the caller.
-- ARGV: none read (its caller passes the values).
-- A schedule's entry in the due set at `at` (ms). `only_new`: an entry already there stays (a definition answered
-- 'same'); otherwise it is moved, and a ticker's record of taking the old run dropped (its lease names a run that
-- is gone). Returns 1 when the entry was added, 0 when one was there. Applied twice it leaves the same.

local function due_at(kd, kt, member, at, only_new, ttl)
  local added
  if only_new then
    added = redis.call('ZADD', KEYS[kd], 'NX', at, member)
  else
    added = redis.call('ZADD', KEYS[kd], at, member)
    redis.call('HDEL', KEYS[kt], member)
  end
  redis.call('PEXPIRE', KEYS[kd], ttl)
  return added
end

-- KEYS[k] kept until at least `at` (Redis ms, a number): its expiry moved later, never earlier, and a key that is not
-- there left so (`t`: a TIME reply this script read already, or nil). An owner's list of schedules outlives each
-- schedule in it, however far off its next run.
local function outlive(k, at, t)
  local left = redis.call('PTTL', KEYS[k])
  if left == -2 then return end
  if left == -1 or clock(t) + left < at then redis.call('PEXPIREAT', KEYS[k], ms(at)) end
end
