-- KEYS: 1 the due set, 2 the entries tickers took (`lib/due.lua`); one slot (the due set's name is the tag).
-- ARGV: the schedule's due-set member, its next run (ms), only new ('1': an entry already there stays), the due
--       set's ttl ms.
-- A schedule's due entry, written apart from the schedule where the due set is in another slot (a Redis Cluster).
-- Returns 1 when the entry was added, 0 when there was one. Applied twice it leaves the same.
-- Uses: due

return due_at(1, 2, ARGV[1], ARGV[2], ARGV[3] == '1', ARGV[4])
