-- KEYS: 1 the push due set.
-- ARGV: job id, and optionally the due time the pass's claim gave it.
-- Takes a job whose every config is done off the due set, unless it is due at once (score 0: a subscription
-- stored, or a config changed, after the pass read the job) or was moved since the claim (another loop put it
-- back while it was due at once: what made it due may be newer than the pass). Returns 1 when it took it off.

local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= 0 then return 0 end
if ARGV[2] and tonumber(score) ~= tonumber(ARGV[2]) then return 0 end
return redis.call('ZREM', KEYS[1], ARGV[1])
