-- KEYS: the job's own four (transition.lua's), then the gate's keys (`Keys.gate_keys`), then the broker queue,
--       its push counter, its bypass list and that list's push counter when the broker is this Redis.
-- ARGV: fallback slots, fair shares ('1'/'0'), key ttl ms, push counter ttl ms ('' = leave it), '1' if the gate
--       forgets the job (finished) or '0' (parked), the job id, then transition.lua's ARGV.
-- A run's last transition (finished, or parked for input) and the gate's leave in one call, on a single Redis
-- (a Redis Cluster keeps the gate in a slot of its own, and calls `gate/leave.lua` after): the job leaves flight
-- only when the move is made now, so a replay (the same request id) gives its slot back no second time. Returns
-- transition.lua's reply, then (when the move was made now) where the job was in the gate (lib/gate.lua's letters,
-- '' unknown) and the released pairs for the caller to publish when no queue was given.
-- Uses: job transition gate gate_bypass gate_pump

local reply, fresh = transition(6)
if not fresh then return reply end
local ttl = tonumber(ARGV[3])
local q = nil
if #KEYS > 13 then q = 14 end
local now = tonumber(reply[3])
local out = {}
-- A bypassed job (lib/gate_pump.lua's gate_admit) was not counted in flight: its end makes no room to fill.
local was = gate_leave(5, q, ARGV[6], ARGV[5] == '1', ttl)
if was ~= 'b' then
  gate_pump(5, q, ARGV[4], now, gate_cap(5, now, ARGV[1], ARGV[2], ttl), ttl, out, false)
end
table.insert(reply, was or '')
for _, x in ipairs(out) do table.insert(reply, x) end
return reply
