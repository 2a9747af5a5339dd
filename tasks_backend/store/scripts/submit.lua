-- KEYS: job, feed, owner index, sweep schedule, then the idempotency key if ARGV[3] is not '', then the queue and
--       the push counter if ARGV[5] is not '' (and the bypass list and its counter with the gate), then the gate's
--       keys (`Keys.gate_keys`) if ARGV[7] is not ''.
-- ARGV: job id, max ttl ms (the owner index's and the schedule's ttl, and how far back the index keeps jobs), idem
--       value ('' = no key), sweep delay ms, message to push ('' = none; with the gate, any other value says the
--       queue is given and the message is in the info), push counter ttl ms ('' = leave it), the job's gate entry
--       (lib/gate.lua) ('' = no gate: the message is pushed as it is), delay (ms from now, or '@' and Redis ms), fallback
--       slots, fair shares ('1'/'0'), request id, job ttl ms, then the record's pairs.
-- The whole submit on a single Redis (see lib/create_job.lua): calling a script costs Redis more than the commands
-- in it, and this is the hot path of every submit; a Redis Cluster runs create, owner_index, schedule and
-- gate.admit instead, one slot each.
-- Returns {createdAt, nil, released pairs...} when made (the pairs: jobs the gate released, for the caller to
-- publish when no queue was given); {createdAt, the value the key holds} when another request holds the
-- idempotency key (the job is made but neither indexed nor enqueued: the caller discards it); {nil, nil} if the id
-- was taken.
-- Applied twice it answers the same; without the gate it pushes twice (a second message for one job is refused by
-- the claim's fencing), with it the gate finds the job admitted already.
-- Uses: create_job index_owner schedule gate gate_bypass gate_pump

local t = redis.call('TIME')
local created, fresh = create_job(11, t)
if not created then return {false, false} end
local k = 5
local idem
if ARGV[3] ~= '' then idem = k; k = k + 1 end
local ttl = tonumber(ARGV[2])  -- parsed once for the four that use it
local held = index_owner(3, idem, ARGV[1], ttl, ARGV[3], ARGV[12], ttl, t)
if held then return {created, held} end
schedule(4, ttl, {ARGV[4], ARGV[1]}, t)
local q
if ARGV[5] ~= '' then q = k; k = k + (ARGV[7] ~= '' and 4 or 2) end
if ARGV[7] ~= '' then
  local now = clock(t)
  local out = {}
  local cap, by = gate_cap(k, now, ARGV[9], ARGV[10], ttl)
  gate_admit(k, q, ARGV[6], ARGV[1], gate_info(ARGV[7]), gate_delay(ARGV[8], now), now, cap, ttl, out, nil, fresh, by)
  return {created, false, unpack(out)}
end
if q then
  push_counted(q, ARGV[5], ARGV[6], ARGV[2])
end
return {created, false}
