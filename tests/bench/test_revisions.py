"""The side-by-side bench (`bench.revisions`): its drains read a side's queues every few milliseconds, inside the
measured window, over one connection per database, not a new one per reading."""

from __future__ import annotations

from pathlib import Path

import redis

from bench.revisions import Revisions, Side
from bench.run import QUICK, ROOT


def test_reading_a_sides_queues_reuses_one_connection(tmp_path: Path) -> None:
    (tmp_path / "redis").mkdir()
    old, new = Side("old", "OLD", ROOT, db=1), Side("new", "this checkout", ROOT, db=2)
    bench = Revisions(old, new, QUICK, tmp_path, ("runner",))
    try:
        probe = redis.Redis(port=bench.redis.port)
        bench.queued(old), bench.queued(new), bench.redis_commands()  # each database's connection made
        before = int(probe.info("stats")["total_connections_received"])
        for _ in range(50):
            assert bench.queued(old) == 0 and bench.queued(new) == 0
            bench.redis_commands()
        bench.idle(old)
        bench.purge()
        assert int(probe.info("stats")["total_connections_received"]) == before
        probe.close()
    finally:
        bench.close()
