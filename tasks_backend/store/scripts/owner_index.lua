-- KEYS: 1 owner index [, 2 idempotency key].
-- ARGV: job id, index ttl ms, idem value, idem ttl ms, max ttl ms.
-- Returns nil when indexed, or the existing idempotency value when another request took the key.
-- Uses: index_owner

return index_owner(1, #KEYS == 2 and 2 or nil, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
