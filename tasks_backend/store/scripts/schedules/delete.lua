-- KEYS: 1 the schedule (hash), 2 the owner's schedules (sorted set), 3 the jobs it made (sorted set), 4 the request
--       that deleted it (string), 5 the owner's schedules declared in code (set), then on a single Redis 6 the due
--       set and 7 the entries tickers took.
-- ARGV: name, max ttl ms, request id, how long the deleting request is kept (ms), the schedule's due-set member (''
--       without keys 6 and 7).
-- Deletes the schedule, and with the due set among its keys its due entry in the same call: one removed after,
-- apart, could be the entry of a schedule of that name another request defined meanwhile (a Redis Cluster has it in
-- another slot: the caller leaves it to the ticker's next look, see `store.schedules`). The jobs it made stay (and
-- so does their index, until the TTL ceiling). Returns 1, or 0 if there was no such schedule. Applied twice it
-- answers 1 both times: the deleting request id is kept a while in KEYS[4], so that a replay is told the schedule
-- it deleted existed.

local existed = redis.call('DEL', KEYS[1])
if existed == 0 then
  if redis.call('GET', KEYS[4]) == ARGV[3] then return 1 end
  return 0
end
redis.call('SET', KEYS[4], ARGV[3], 'PX', ARGV[4])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[5], ARGV[1])
if ARGV[5] ~= '' then
  redis.call('ZREM', KEYS[6], ARGV[5])
  redis.call('HDEL', KEYS[7], ARGV[5])
end
if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
return existed
