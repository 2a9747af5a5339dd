-- KEYS: KEYS[kd] the schedules' due set (member -> next run ms), KEYS[kt] the entries tickers took; positions given
--       by the caller.
-- ARGV: none read (its caller passes the values).
-- A schedule's entry in the due set at `at` (ms). `only_new`: an entry already there stays (a definition answered
-- 'same'); otherwise it is moved, and a ticker's record of taking the old run dropped (its lease names a run that
-- is gone). Applied twice it leaves the same.

local function due_at(kd, kt, member, at, only_new, ttl)
  if only_new then
    redis.call('ZADD', KEYS[kd], 'NX', at, member)
  else
    redis.call('ZADD', KEYS[kd], at, member)
    redis.call('HDEL', KEYS[kt], member)
  end
  redis.call('PEXPIRE', KEYS[kd], ttl)
end
