-- KEYS: 1 a schedule (one global sorted set; members job ids, scores Redis ms).
-- ARGV: key ttl ms, then (delay ms, member) pairs: each member becomes due `delay` from now. Returns now.
-- Uses: schedule

local entries = {}
for i = 2, #ARGV do table.insert(entries, ARGV[i]) end
return schedule(1, ARGV[1], entries)
