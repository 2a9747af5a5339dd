-- KEYS: 1 the owner's rate hash.
-- ARGV: none read (its callers pass the fields).
-- The rate hash keeps the theoretical arrival time `tat` (microseconds) of the next request, and the fields
-- given after it; it lives until that time has passed (it then says nothing a missing hash would not).

local function keep_tat(now, tat, ...)
  redis.call('HSET', KEYS[1], 'tat', string.format('%.0f', tat), ...)
  redis.call('PEXPIRE', KEYS[1], math.ceil((tat - now) / 1000) + 1000)
end
