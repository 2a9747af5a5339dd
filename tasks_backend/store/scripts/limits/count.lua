-- KEYS: 1 unfinished set, 2 prune mark, 3 owner index (the owner's: one Redis Cluster slot).
-- ARGV: none.
-- Uses: active
-- Returns the owner's unfinished job count (read only).

return active(1)
