-- KEYS: 1 a job (hash).
-- ARGV: the name of the schedule that made it.
-- Writes the schedule's name on the job, if the job still exists. Returns 1, or 0 if it is gone. Applied twice it
-- gives the same outcome.

if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'sched', ARGV[1])
return 1
