-- KEYS: 1 rate hash.
-- ARGV: limit, window (microseconds), nonce, requests' worth to charge.
-- Uses: rate
-- Returns 1 if charged, 0 if not (no rate limit, or this nonce's charge was made already).
-- Charges the extra work of a request already admitted, past the limit if need be: the requests that follow are
-- refused until the debt has refilled. Applied twice it charges once (`cn`: the last charge's nonce).

local limit = tonumber(ARGV[1])
if limit <= 0 or redis.call('HGET', KEYS[1], 'cn') == ARGV[3] then return 0 end
local now = clock_us()
local tat = math.max(tonumber(redis.call('HGET', KEYS[1], 'tat')) or 0, now)
keep_tat(now, tat + tonumber(ARGV[4]) * tonumber(ARGV[2]) / limit, 'cn', ARGV[3])
return 1
