"""The dispatch gate over real workers and real HTTP: delayed jobs, priorities, fair shares, concurrency per key.

Each test has keys and a queue of its own (`make_settings`), a worker with a known number of slots, and the app
served over HTTP for its settings. Jobs write when they start and end to a ledger file."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tasks_backend.config import Settings
from tasks_backend.service.runtime import build_runtime
from tests.conftest import Serve, bearer, make_settings, wait_until
from tests.support.procs import worker_process

ALICE, BOB = bearer("alice-token"), bearer("bob-token")


@contextlib.contextmanager
def worker(settings: Settings, slots: int, logs: Path) -> Iterator[None]:
    """A real worker process with `slots` slots on the test's queue, once it has published them to the gate."""
    store = build_runtime(settings).store
    proc = worker_process(settings, logs / "worker.log", pool="threads", concurrency=slots)
    try:
        wait_until(lambda: store.redis.zcard(store.keys.gate(settings.queue, "workers")) > 0, timeout=30)
        yield
    finally:
        proc.stop()


def ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def started(path: Path, tag: str) -> float | None:
    return next((e["t"] for e in ledger(path) if e["event"] == "start" and e["tag"] == tag), None)


def submit(http: httpx.Client, who: dict[str, str], operation: str = "test.mark", **fields: Any) -> dict[str, Any]:
    params = fields.pop("params")
    response = http.post("/v1/jobs", json={"operation": operation, "params": params, **fields}, headers=who)
    assert response.status_code == 202, response.text
    return dict(response.json())


@pytest.fixture
def served(serve: Serve) -> Callable[[Settings], httpx.Client]:
    clients: list[httpx.Client] = []

    def make(settings: Settings) -> httpx.Client:
        clients.append(httpx.Client(base_url=serve(settings), timeout=10))
        return clients[-1]

    yield make  # type: ignore[misc]
    for c in clients:
        c.close()


def test_a_delayed_job_starts_after_its_delay_within_a_second(redis_base: str, served: Any, tmp_path: Path) -> None:
    settings = make_settings(redis_base)
    http = served(settings)
    book = tmp_path / "ledger"
    with worker(settings, 2, tmp_path):
        t0 = time.time()
        at = dt.datetime.fromtimestamp(t0 + 3, dt.UTC).isoformat().replace("+00:00", "Z")
        delayed = submit(http, ALICE, delayMs=3000, params={"ledger": str(book), "tag": "delay"})
        timed = submit(http, ALICE, runAt=at, priority=7, params={"ledger": str(book), "tag": "runat"})
        assert delayed["status"] == "working" and delayed["priority"] == 5 and "runAt" in delayed
        assert timed["priority"] == 7 and timed["runAt"].startswith(at[:19])
        shown = http.get(f"/v1/jobs/{delayed['taskId']}", headers=ALICE).json()
        assert shown["status"] == "working" and "Waiting to start at" in shown["statusMessage"]
        wait_until(lambda: started(book, "delay") and started(book, "runat"), timeout=8)
    assert 3.0 <= (started(book, "delay") or 0) - t0 <= 4.0
    assert 3.0 <= (started(book, "runat") or 0) - t0 <= 4.0


def test_a_higher_priority_job_goes_ahead_of_its_owners_queue(make_broker_settings: Callable[..., Settings],
                                                              served: Any, tmp_path: Path) -> None:
    settings = make_broker_settings()
    http = served(settings)
    book, hold = tmp_path / "ledger", tmp_path / "hold"
    with worker(settings, 1, tmp_path):
        submit(http, ALICE, params={"ledger": str(book), "tag": "busy", "hold": str(hold)})
        wait_until(lambda: started(book, "busy"))
        for i in range(50):
            submit(http, ALICE, priority=1, params={"ledger": str(book), "tag": f"low{i}"})
        submit(http, ALICE, priority=9, params={"ledger": str(book), "tag": "urgent"})
        hold.touch()
        wait_until(lambda: sum(e["event"] == "end" for e in ledger(book)) == 52, timeout=30)
    order = [e["tag"] for e in ledger(book) if e["event"] == "start"]
    assert order[:3] == ["busy", "urgent", "low0"]
    assert order[2:] == [f"low{i}" for i in range(50)]  # then submission order


def test_another_owners_job_starts_after_at_most_two_jobs_per_slot_of_a_flood(
        make_broker_settings: Callable[..., Settings], served: Any, tmp_path: Path) -> None:
    settings = make_broker_settings(max_active_jobs=0, rate_limit=0)
    http = served(settings)
    service = build_runtime(settings).service
    book, slots = tmp_path / "ledger", 2
    with worker(settings, slots, tmp_path):
        for i in range(2000):
            service.submit("alice", "test.mark", {"ledger": str(book), "tag": f"a{i}", "seconds": 0.02})
        t_submit = time.time()
        submit(http, BOB, params={"ledger": str(book), "tag": "bob"})
        wait_until(lambda: started(book, "bob"), timeout=15)
        t_start = started(book, "bob") or 0
        flood = [e for e in ledger(book) if e["event"] == "start" and e["tag"].startswith("a")]
    assert len(flood) < 1900, "the flood was still queued when the other owner submitted"
    ahead = [e for e in flood if t_submit < e["t"] < t_start]
    assert len(ahead) <= 2 * slots, ahead


def test_at_most_max_jobs_per_key_run_at_once_and_the_others_hold_no_slot(redis_base: str, served: Any,
                                                                          tmp_path: Path) -> None:
    settings = make_settings(redis_base)
    http = served(settings)
    book = tmp_path / "ledger"
    with worker(settings, 8, tmp_path):
        for customer in ("c1", "c2", "c3"):
            for i in range(4):
                submit(http, ALICE, "test.limited",
                       params={"ledger": str(book), "tag": f"{customer}:{i}", "customer_id": customer, "seconds": 0.4})
        submit(http, ALICE, params={"ledger": str(book), "tag": "free:0", "seconds": 0.1})
        wait_until(lambda: sum(e["event"] == "end" for e in ledger(book)) == 13, timeout=20)
    events = ledger(book)
    spans = {e["tag"]: [e["t"], 0.0] for e in events if e["event"] == "start"}
    for e in events:
        if e["event"] == "end":
            spans[e["tag"]][1] = e["t"]

    def running_at(t: float, prefix: str = "") -> int:
        return sum(1 for tag, (a, b) in spans.items() if tag.startswith(prefix) and a <= t < b)

    starts = [a for a, _ in spans.values()]
    for customer in ("c1", "c2", "c3"):
        assert max(running_at(t, customer + ":") for t in starts) == 2
    # The customers' waiting jobs held no slot: all three customers ran two at once, and the free job beside them.
    assert max(running_at(t) for t in starts) >= 6
    assert spans["free:0"][0] < min(a for tag, (a, _) in spans.items() if tag.endswith(":2"))


def test_a_cancelled_run_keeps_its_concurrency_value_full_until_its_code_ends(redis_base: str, served: Any,
                                                                             tmp_path: Path) -> None:
    """A cancel fences a running job out at once, but its code goes on to its next cancellation point: the next job
    of its value waits for that, or `max` would be passed while the first still runs."""
    settings = make_settings(redis_base)
    http, store = served(settings), build_runtime(settings).store
    book, hold = tmp_path / "ledger", tmp_path / "hold"
    params = {"ledger": str(book), "customer_id": "acme", "hold": str(hold)}
    with worker(settings, 4, tmp_path):
        first = submit(http, ALICE, "test.limited_uncancellable", params={**params, "tag": "first"})
        wait_until(lambda: started(book, "first"))
        second = submit(http, ALICE, "test.limited_uncancellable", params={**params, "tag": "second"})
        jobs = store.keys.gate(settings.queue, "jobs")
        wait_until(lambda: str(store.redis.hget(jobs, second["taskId"]) or "").startswith("h"))
        assert http.post(f"/v1/jobs/{first['taskId']}/cancel", headers=ALICE).status_code == 202
        # The cancel answered after its leave of the gate: the second is still held, the value still full.
        assert str(store.redis.hget(jobs, second["taskId"])).startswith("h")
        assert started(book, "second") is None
        hold.touch()
        wait_until(lambda: started(book, "second"), timeout=15)
    first_end = next(e["t"] for e in ledger(book) if e["event"] == "end" and e["tag"] == "first")
    assert started(book, "second") >= first_end
    assert http.get(f"/v1/jobs/{first['taskId']}", headers=ALICE).json()["status"] == "cancelled"


def test_a_job_on_a_free_key_starts_while_its_owner_has_many_waiting_on_a_full_one(redis_base: str, served: Any,
                                                                                 tmp_path: Path) -> None:
    """80 of one owner's jobs for one customer (two at a time, both held running), then one for another customer: it
    starts at once on a free slot, not once the first customer's queue has shrunk; the others then run in order."""
    settings = make_settings(redis_base)
    http = served(settings)
    service = build_runtime(settings).service
    book, hold = tmp_path / "ledger", tmp_path / "hold"
    with worker(settings, 4, tmp_path):
        for i in range(80):
            service.submit("alice", "test.limited", {"ledger": str(book), "tag": f"c1:{i}", "customer_id": "c1",
                                                     "hold": str(hold), "seconds": 0})
        wait_until(lambda: started(book, "c1:1"))
        submit(http, ALICE, "test.limited", params={"ledger": str(book), "tag": "c2:0", "customer_id": "c2",
                                                    "seconds": 0})
        wait_until(lambda: started(book, "c2:0"), timeout=10, message="the other customer's job started")
        assert not started(book, "c1:2")  # the first customer's two still run
        hold.touch()
        wait_until(lambda: sum(e["event"] == "end" for e in ledger(book)) == 81, timeout=60)
    order = [int(e["tag"][3:]) for e in ledger(book) if e["event"] == "start" and e["tag"].startswith("c1:")]
    # Sent in order; two run at once, so jobs sent close together may start in either order (a worker process
    # that pops a message and is not scheduled at once), but none far from its place.
    assert sorted(order) == list(range(80)) and all(abs(n - k) <= 3 for k, n in enumerate(order)), order
