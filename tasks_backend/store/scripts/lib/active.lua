-- KEYS: KEYS[k] the unfinished set, KEYS[k + 1] the prune mark, KEYS[k + 2] the owner index; k from the caller.
-- ARGV: none read.
-- The owner's unfinished jobs: those known unfinished at the last prune, plus every job indexed since the mark.

local function active(k)
  local mark = redis.call('GET', KEYS[k + 1])
  return redis.call('SCARD', KEYS[k]) + redis.call('ZCOUNT', KEYS[k + 2], mark and ('(' .. mark) or '-inf', '+inf')
end
