-- KEYS: KEYS[ks] a schedule (sorted set; members job ids, scores Redis ms); position given by the caller.
-- ARGV: none read (its caller passes the entries).
-- Each (delay ms, member) pair of `entries` becomes due `delay` from now. Returns now.

local function schedule(ks, key_ttl, entries, t)
  local now = clock(t)
  local args = {}
  for i = 1, #entries, 2 do
    table.insert(args, string.format('%d', now + tonumber(entries[i])))
    table.insert(args, entries[i + 1])
  end
  redis.call('ZADD', KEYS[ks], unpack(args))
  keep(ks, key_ttl)
  return string.format('%d', now)
end
