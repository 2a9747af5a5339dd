"""A web worker's instructions per request (`bench.web_instructions`), counted by valgrind's callgrind on a real
gunicorn worker serving the product's priority submit: two counts of the same requests agree. (Its table is
`bench.submit_instructions.report`'s, tested there.)"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from bench import web_instructions as bench
from tasks_backend.devtools.embedded import EmbeddedRedis


# The interpreter's start under callgrind alone takes a minute or so, and more beside the suite's other process on a
# slow instance (it passed the suite's 120 s there): the deadline is for a hung run, not for a slow one.
@pytest.mark.timeout(360)
def test_two_counts_of_the_same_requests_by_one_worker_agree() -> None:
    with tempfile.TemporaryDirectory(prefix="tb-web-instructions-test-") as work:
        redis = EmbeddedRedis(appendonly=False, data_dir=work).start()
        try:
            url = f"redis://{redis.host}:{redis.port}/0"
            with bench.worker_under_callgrind(bench.PRIORITY, url, Path(work)) as (send, counter):
                first, second = (bench.per_request(send, counter, 40, 10) for _ in range(2))
        finally:
            redis.stop()
    assert abs(first - second) / first < 0.02, (first, second)
    # A request's whole way through the worker: its parse, the app, a Redis round trip, its access line.
    assert first > 200_000

