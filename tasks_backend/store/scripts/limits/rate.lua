-- KEYS: 1 rate hash, 2 unfinished set, 3 prune mark, 4 owner index (all the owner's: one Redis Cluster slot).
-- ARGV: limit, window (microseconds), nonce, requests wanted at once.
-- Uses: active rate
-- Returns {"granted remaining retry_us reset_us" or "" (no rate limit), unfinished job count, Redis's time in ms}.
-- A GCRA: a burst of `limit`, refilled evenly over the window. Applied twice with one nonce it answers the same.

local now = clock_us()
local active = active(2)
local now_ms = math.floor(now / 1000)
local limit = tonumber(ARGV[1])
if limit <= 0 then return {'', active, now_ms} end
local st = redis.call('HMGET', KEYS[1], 'tat', 'n', 'r')
if st[2] == ARGV[3] and st[3] then return {st[3], active, now_ms} end
local window = tonumber(ARGV[2])
local interval = window / limit
local tat = math.max(tonumber(st[1]) or 0, now)
local fit = math.floor((window - (tat - now)) / interval)
local answer
if fit < 1 then
  answer = '0 0 ' .. string.format('%.0f', tat + interval - now - window) .. ' ' .. string.format('%.0f', tat - now)
else
  local granted = math.min(fit, tonumber(ARGV[4]))
  tat = tat + granted * interval
  answer = granted .. ' ' .. (fit - granted) .. ' 0 ' .. string.format('%.0f', tat - now)
end
keep_tat(now, tat, 'n', ARGV[3], 'r', answer)
return {answer, active, now_ms}
