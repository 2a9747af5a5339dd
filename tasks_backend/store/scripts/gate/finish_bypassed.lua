-- KEYS: the job's own four (transition.lua's), then the gate's `jobs` hash (`Keys.gate_keys`' first).
-- ARGV: the job id, then transition.lua's ARGV.
-- A run's end, when its job was sent past the gate (a lone owner's bypass, lib/gate_pump.lua's gate_admit: entry
-- 'b', never counted in flight): its last transition and the drop of that entry, all `gate/finish.lua` does for such
-- a job, without the gate's keys and rules (the runner's hot path while one owner alone has jobs queued). Any other
-- job is left untouched and answered {'gate'}, for the caller to end with `gate/finish.lua`: one the gate holds more
-- for, one it has no entry for (finish.lua then pumps), and a replay (the first call dropped the entry; finish.lua
-- answers it as transition.lua does). Returns transition.lua's reply, or {'gate'}.
-- Uses: job transition

local raw = redis.call('HGET', KEYS[5], ARGV[1])
if not raw or string.sub(raw, 1, 2) ~= 'b|' then return {'gate'} end
local reply, fresh = transition(1)
if fresh then redis.call('HDEL', KEYS[5], ARGV[1]) end
return reply
