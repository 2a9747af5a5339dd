-- KEYS: the job's own four (transition.lua's), then the gate's `jobs` hash (`Keys.gate_keys`' first).
-- ARGV: the job id, then transition.lua's ARGV.
-- A run's end, when its job was sent past the gate (a lone owner's bypass, lib/gate_pump.lua's gate_admit: entry
-- 'b', never counted in flight): its last transition and the drop of that entry, all `gate/finish.lua` would do for
-- it, without the gate's keys and rules (the runner's hot path while one owner alone has jobs queued). A job the gate
-- holds anything else for is left untouched, answered {'gate'}: the caller ends it with `gate/finish.lua`. A job
-- without an entry (or a replay: the first call dropped it) is only moved. Returns transition.lua's reply, or {'gate'}.
-- Uses: job transition

local raw = redis.call('HGET', KEYS[5], ARGV[1])
if raw and string.sub(raw, 1, 2) ~= 'b|' then return {'gate'} end
local reply, fresh = transition(1)
if fresh and raw then redis.call('HDEL', KEYS[5], ARGV[1]) end
return reply
