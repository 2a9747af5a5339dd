-- KEYS: the gate's keys (`Keys.gate_keys`), then the broker queue, its push counter, its bypass list and that list's
--       push counter when the broker is this Redis.
-- ARGV: fallback slots, fair shares ('1'/'0'), key ttl ms, push counter ttl ms ('' = leave it), then '1' if the
--       gate forgets the jobs (finished), '0' (parked: a later admission reuses what it knew), '0@' and the Redis ms
--       the caller saw them parked at (the same, but a job admitted again since stays: lib/gate_pump.lua's
--       gate_leave) or 'w' (cancelled: it forgets those that wait; one sent to a worker leaves at its run's end),
--       then job ids.
-- Jobs leave flight (their runs ended), and the pump releases held jobs into the room they made (lib/gate.lua).
-- Returns {released id, message or operation, ...} for the caller to publish when no queue was given. Applied
-- twice, the second finds nothing to take away. A run's own end leaves in its last transition instead
-- (`gate/finish.lua`) on a single Redis.
-- Uses: gate gate_bypass gate_pump

local now = clock()
local ttl = tonumber(ARGV[3])
local q = nil
if #KEYS > 9 then q = 10 end
local room = false  -- jobs sent past the gate (lib/gate.lua's bypass) were not counted in flight: no room to fill
local mode, seen = ARGV[5], nil
if string.sub(mode, 1, 2) == '0@' then mode, seen = '0', tonumber(string.sub(mode, 3)) end
for i = 6, #ARGV do
  local was = gate_leave(1, q, ARGV[i], mode ~= '0', ttl, mode == 'w', seen)
  if was ~= 'b' and was ~= 'kept' then room = true end
end
local out = {}
if room then gate_pump(1, q, ARGV[4], now, gate_cap(1, now, ARGV[1], ARGV[2], ttl), ttl, out, false) end
return out
