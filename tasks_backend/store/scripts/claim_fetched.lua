-- KEYS: job, feed, steps, answers (claim.lua's), then kombu's unacked index and unacked hash.
-- ARGV: claim.lua's five, then the message's delivery tag, its unacked index score, its unacked record, then
--       the delivery tags of messages acknowledged since the last call (none or more).
-- A worker's fetch of a job message and its claim in one call, when the broker is the store's Redis: kombu's
-- own late-ack bookkeeping (the message kept until acknowledged, restored if the worker is lost; the earlier
-- messages' acknowledgements ride along), then the claim as claim.lua makes it, with its reply. Applied twice
-- it answers the same (the claim's request id; removing a removed tag removes nothing).
-- Uses: job claim

if #ARGV > 8 then
  local acked = {unpack(ARGV, 9)}
  redis.call('ZREM', KEYS[5], unpack(acked))
  redis.call('HDEL', KEYS[6], unpack(acked))
end
redis.call('ZADD', KEYS[5], ARGV[7], ARGV[6])
redis.call('HSET', KEYS[6], ARGV[6], ARGV[8])
return claim_job()
