-- KEYS: 1 job, 2 push configs, 3 push cursors, 4 push lock.
-- ARGV: lock token, then (config id, cursor as read, new cursor) triples.
-- Saves each cursor that nobody changed since it was read, and only while its config exists (deleted
-- or replaced configs are left alone), gives the cursors the job's expiry, and releases the lock.
-- Returns -1 when another worker holds the lock (nothing written), 1 when a config was added, changed
-- or replaced during the pass (look again at once), else 0. Applied twice, the second run finds the
-- lock gone and every cursor already saved: it writes nothing (and asks for one more, harmless, pass).

local lock = redis.call('GET', KEYS[4])
if lock and lock ~= ARGV[1] then return -1 end
local h = redis.call('HMGET', KEYS[1], 'created', 'ttl')
local changed, seen = 0, {}
for i = 2, #ARGV, 3 do
  local id, old, new = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  seen[id] = true
  if h[1] and redis.call('HEXISTS', KEYS[2], id) == 1 then
    local cur = redis.call('HGET', KEYS[3], id) or ''
    if cur ~= old then
      changed = 1
    elseif new ~= old then
      redis.call('HSET', KEYS[3], id, new)
    end
  end
end
for _, id in ipairs(redis.call('HKEYS', KEYS[2])) do
  if not seen[id] then changed = 1 end
end
if h[1] then redis.call('PEXPIREAT', KEYS[3], tonumber(h[1]) + tonumber(h[2])) end
if lock then redis.call('DEL', KEYS[4]) end
return changed
