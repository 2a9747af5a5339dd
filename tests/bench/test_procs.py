"""The benches' readings of what Redis spent (`bench.procs`), on a real Redis."""

from __future__ import annotations

import redis

from bench import procs

#: Spins until Redis's own clock has moved on by ARGV[1] microseconds.
SPIN = """
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start >= tonumber(ARGV[1])
return 1
"""


def test_script_usec_counts_the_time_redis_spends_in_scripts(redis_base: str) -> None:
    db = redis.Redis.from_url(f"{redis_base}/11")
    before = procs.script_usec(db)
    db.eval(SPIN, 0, 20_000)
    sha = db.script_load(SPIN)
    db.evalsha(sha, 0, 20_000)
    # Other tests' scripts may run meanwhile on this server: only a lower bound holds.
    assert procs.script_usec(db) - before >= 40_000
