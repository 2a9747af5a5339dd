-- KEYS: 1 job hash, 2 feed.
-- ARGV: request id, ttl ms, name/value pairs of the new record (state first). See lib/create_job.lua.
-- Uses: create_job

return create_job(1)
