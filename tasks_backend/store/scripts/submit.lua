-- KEYS: job, feed, owner index, sweep schedule, then the idempotency key if ARGV[3] is not '', then the queue and
--       the push counter if ARGV[5] is not ''.
-- ARGV: job id, max ttl ms (the owner index's and the schedule's ttl, and how far back the index keeps jobs), idem
--       value ('' = no key), sweep delay ms, message to push ('' = none), push counter ttl ms ('' = leave it),
--       request id, job ttl ms, then the record's pairs.
-- The whole submit on a single Redis (see lib/create_job.lua): calling a script costs Redis more than the commands
-- in it, and this is the hot path of every submit; a Redis Cluster runs create, owner_index and schedule instead,
-- one slot each.
-- Returns {createdAt, nil} when made; {createdAt, the value the key holds} when another request holds the
-- idempotency key (the job is made but neither indexed nor enqueued: the caller discards it); {nil, nil} if the id
-- was taken.
-- Applied twice it answers the same and pushes twice; a second message for one job is refused by the claim's
-- fencing.
-- Uses: create_job index_owner schedule

local t = redis.call('TIME')
local created = create_job(7, t)
if not created then return {false, false} end
local k = 5
local idem
if ARGV[3] ~= '' then idem = k; k = k + 1 end
local held = index_owner(3, idem, ARGV[1], ARGV[2], ARGV[3], ARGV[8], ARGV[2], t)
if held then return {created, held} end
schedule(4, ARGV[2], {ARGV[4], ARGV[1]}, t)
if ARGV[5] ~= '' then
  redis.call('LPUSH', KEYS[k], ARGV[5])
  redis.call('INCR', KEYS[k + 1])
  if ARGV[6] ~= '' then redis.call('PEXPIRE', KEYS[k + 1], ARGV[6]) end
end
return {created, false}
