-- KEYS: the gate's keys (`Keys.gate_keys`), then the broker queue, its push counter, its bypass list and that list's
--       push counter when the broker is this Redis.
-- ARGV: fallback slots, fair shares ('1'/'0'), key ttl ms, push counter ttl ms ('' = leave it), then job id, its
--       entry ('' = what the gate knows of it), delay (ms from now, or '@' and Redis ms), whether it leaves flight
--       first (a retry or a hand-back: the run that ends is the one in flight): '0' no, '@' and the Redis ms the
--       run that ends was claimed at, or '1' (from a process before that time was passed), and its message or
--       operation (for a re-admission: the gate keeps it only while a job waits).
-- Makes one job runnable (see lib/gate.lua). Returns {known, released id, message or operation, ...}: known 0
-- when the gate knows nothing of the job (the caller publishes it as it is); the pairs are for the caller to
-- publish when no queue was given. Applied twice: the second finds the job held, delayed or in flight; a retry's
-- second finds it let in again after its run was claimed, and leaves it so (a second leave would send it twice).
-- Uses: gate gate_bypass gate_pump

local now = clock()
local ttl = tonumber(ARGV[3])
local q = nil
if #KEYS > 9 then q = 10 end
local leaves = ARGV[8] ~= '0' and ARGV[8] ~= ''
if string.sub(ARGV[8], 1, 1) == '@' then
  local since = redis.call('ZSCORE', KEYS[4], ARGV[5])
  if since and tonumber(since) > tonumber(string.sub(ARGV[8], 2)) then return {1} end
end
if leaves then gate_leave(1, q, ARGV[5], false, ttl) end
local info = nil
if ARGV[6] ~= '' then info = gate_info(ARGV[6]) end
local out = {}
local delay = gate_delay(ARGV[7], now)
local cap, by = gate_cap(1, now, ARGV[1], ARGV[2], ttl)
local known = gate_admit(1, q, ARGV[4], ARGV[5], info, delay, now, cap, ttl, out, ARGV[9], false, by)
-- A retry that waits (a delay) does not run the pump as a hold does: the room its leave made is filled now.
if leaves and delay > 0 then gate_pump(1, q, ARGV[4], now, cap, ttl, out, false) end
return {known and 1 or 0, unpack(out)}
