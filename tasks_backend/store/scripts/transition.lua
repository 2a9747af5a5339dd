-- KEYS: job, feed, steps, answers.
-- ARGV: request id, token ('' = not fenced), target state, allowed source states csv, owner ('' = any),
--       then name/value pairs.
-- Returns {outcome, state before, time of the change}: ok | missing | fenced | cancelled | illegal.
--
-- A completion by a token's holder keeps no reply record, and drops the claim's: only the holder of the
-- current token can complete a job (no sweep, claim or cancel completes one, and each of them that moves
-- the job on moves the token or the state), so a replay that finds the job completed under its own token
-- is that completion applied before, and answers as it did. Every finished job is then one field shorter.
-- Uses: job transition

local reply = transition(0)
return reply
