-- KEYS: KEYS[ix] the owner index, KEYS[ik] the idempotency key (ik nil: none); positions given by the caller.
-- ARGV: none read (its caller passes the values).
-- Scores the job with Redis's time in ms with microseconds (quick submissions list in the order made). With an
-- idempotency key it claims the key first. Returns nil when indexed, or the value the key holds when another
-- request took it. Entries older than the longest retention are dropped by about one submit in eight, chosen by the
-- job id's last byte (a replay chooses as its first call did): a listing skips a gone job's entry anyway, and the
-- index stays within a few entries of what a trim on every submit would keep.

local function index_owner(ix, ik, job_id, index_ttl, idem_value, idem_ttl, max_ttl, t)
  if ik then
    if not redis.call('SET', KEYS[ik], idem_value, 'NX', 'PX', idem_ttl) then
      local held = redis.call('GET', KEYS[ik])
      -- Our own value: this is the replay of a request whose reply was lost.
      if held ~= idem_value then return held or '' end
    end
  end
  local now = clock(t, true)
  redis.call('ZADD', KEYS[ix], string.format('%.3f', now), job_id)
  if string.byte(job_id, -1) % 8 == 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[ix], '-inf', '(' .. string.format('%d', now - tonumber(max_ttl)))
  end
  keep(ix, index_ttl)
  return nil
end
