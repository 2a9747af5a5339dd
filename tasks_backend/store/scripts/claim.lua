-- KEYS: job, feed, steps, answers.
-- ARGV: request id, lease ms, worker name, max attempts, exhausted error json.
-- Returns {outcome, token[, the job hash as HGETALL read it, the name/value pairs the claim wrote]}: ok |
-- missing | terminal | parked | busy | exhausted (on "ok" the caller lays the second list over the first,
-- and drops `msg`, `mark` and `gone`; a replayed "ok" carries the hash as written, and no second list).
-- A running job whose lease lapsed may be claimed again (its worker is fenced by the new token).
-- The reply carries the hash as read rather than a rebuilt record: turning Lua tables into a reply
-- costs Redis more per element than anything else here.
-- Uses: job claim

return claim_job()
