"""The ticker: one job per tick, across two sweeper processes, a SIGKILL, a crash between its steps and a stop."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks_backend.errors import UnknownOperation
from tasks_backend.model.schedules import Schedule
from tasks_backend.running.ticker import Pass, Ticker
from tasks_backend.service.runtime import Runtime, build_runtime
from tasks_backend.service.schedules import ScheduleService
from tasks_backend.store.schedules import member
from tests.conftest import make_settings, show_logs_on_failure, wait_until
from tests.support.procs import Proc, settings_env, sweeper_process, tails, worker_process


@pytest.fixture
def own(redis_base: str) -> Runtime:
    """A runtime with keys and a queue of its own (so that its due set holds only this test's schedules)."""
    return build_runtime(make_settings(redis_base))


def ticks_made(service: ScheduleService, owner: str, name: str) -> list[int]:
    """The tick of each job the schedule made, from the job's idempotency key, oldest first."""
    records, _ = service.jobs_of(owner, name, limit=200)
    return sorted(int(str(r.idempotency_key).rsplit(":", 1)[1]) for r in records)


def assert_one_job_per_tick(service: ScheduleService, owner: str, name: str, period_ms: int) -> list[int]:
    ticks = ticks_made(service, owner, name)
    assert len(ticks) == len(set(ticks)), f"a tick made two jobs: {ticks}"
    assert [b - a for a, b in itertools.pairwise(ticks)] == [period_ms] * (len(ticks) - 1), ticks
    # Every job of the owner that names the schedule is one of those (none made twice under another key).
    jobs, _ = service.jobs.list(owner, limit=200)
    assert len([j for j in jobs if j.schedule == name]) == len(ticks)
    return ticks


@pytest.fixture
def procs(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[list[Proc]]:
    started: list[Proc] = []
    show_logs_on_failure(request, lambda: tails(started))
    try:
        yield started
    finally:
        for proc in started:
            proc.stop()


def test_two_sweepers_make_one_job_per_tick_across_a_sigkill(own: Runtime, procs: list[Proc], tmp_path: Path) -> None:
    service = own.schedules()
    service.define("alice", {"name": "every2", "operation": "test.noop", "everySeconds": 2, "catchUp": "all"})
    procs.append(worker_process(own.settings, tmp_path / "worker.log", pool="threads", concurrency=2))
    first = sweeper_process(own.settings, tmp_path / "sweeper-a.log")
    procs += [first, sweeper_process(own.settings, tmp_path / "sweeper-b.log")]

    def made(count: int) -> Any:
        return lambda: len(ticks_made(service, "alice", "every2")) >= count

    wait_until(made(3), timeout=15, message="three ticks")
    first.kill_group(signal.SIGKILL)
    before = len(ticks_made(service, "alice", "every2"))
    wait_until(made(before + 3), timeout=15, message="three ticks after the kill")
    procs.append(sweeper_process(own.settings, tmp_path / "sweeper-a2.log"))  # restarted
    wait_until(made(before + 5), timeout=15, message="ticks with the restarted sweeper")
    for proc in procs[1:]:
        proc.stop()
    ticks = assert_one_job_per_tick(service, "alice", "every2", 2000)
    assert len(ticks) >= before + 5
    # The jobs ran on the worker.
    jobs, _ = service.jobs.list("alice", limit=200)
    wait_until(lambda: all(j.terminal for j in service.jobs.store.get_many([j.id for j in jobs]) if j),
               timeout=15, message="the jobs to run")


def test_a_pass_that_dies_after_making_a_job_leaves_the_next_pass_to_finish_the_same_tick(own: Runtime) -> None:
    service = own.schedules()
    service.define("alice", {"name": "crashy", "operation": "test.noop", "everySeconds": 1, "catchUp": "all"})
    made: list[str] = []

    def fire_then_die(schedule: Schedule, tick: int) -> str:
        made.append(service.fire(schedule, tick))
        raise SystemError("killed after the job was made")

    dying = Ticker(service.store, fire_then_die, lease_ms=300)
    wait_until(lambda: dying.tick_once().failed, timeout=5, message="a tick")
    pending = service.get("alice", "crashy").pending
    assert len(pending) == 1 and len(made) == 1
    healthy = service.ticker(lease_ms=300)
    wait_until(lambda: healthy.tick_once() and not service.get("alice", "crashy").pending,
               timeout=5, message="the pending tick finished")
    assert service.get("alice", "crashy").last_job_id == made[0]
    assert ticks_made(service, "alice", "crashy")[0] == pending[0]
    wait_until(lambda: len(ticks_made(service, "alice", "crashy")) >= 3 or healthy.tick_once() is None,
               timeout=5, message="more ticks")
    assert_one_job_per_tick(service, "alice", "crashy", 1000)


def test_a_tick_whose_job_can_never_be_made_is_let_go_and_the_schedule_goes_on(own: Runtime) -> None:
    service = own.schedules()
    service.define("alice", {"name": "gone", "operation": "test.noop", "everySeconds": 1, "catchUp": "all"})
    refused: list[int] = []

    def fire(schedule: Schedule, tick: int) -> str:
        if not refused or tick == refused[0]:  # the first tick's job is refused every time it is tried
            refused.append(tick)
            raise UnknownOperation("the operation is no longer registered")
        return service.fire(schedule, tick)

    ticker = Ticker(service.store, fire, lease_ms=300, let_go_after_ms=1500)
    wait_until(lambda: ticker.tick_once() and len(ticks_made(service, "alice", "gone")) >= 2,
               timeout=8, message="the ticks after the refused one")
    # Tried again for a while (a sweeper not yet deployed with the operation would get it then), then let go.
    assert set(refused) == {refused[0]} and len(refused) >= 2
    made = ticks_made(service, "alice", "gone")
    assert refused[0] not in made and min(made) > refused[0]
    assert not service.get("alice", "gone").pending


def test_the_ticker_keeps_the_due_set_alive(own: Runtime) -> None:
    """Only a definition or a resume set the due set's TTL: schedules that tick on for longer, with neither,
    would stop when it lapsed. The ticker's passes renew it once half of it is gone."""
    service = own.schedules()
    service.define("alice", {"name": "long", "operation": "test.noop", "everySeconds": 3600})
    due = own.store.keys.schedules_due()
    own.store.redis.pexpire(due, 1000)  # as if the last definition were nearly a TTL ago
    service.ticker().tick_once()
    assert own.store.redis.pttl(due) > own.store.max_ttl_ms // 2
    service.ticker().tick_once()  # and, renewed, it is not written again at every pass
    assert own.store.redis.pttl(due) > own.store.max_ttl_ms // 2


def test_catch_up_after_a_ten_second_stop(own: Runtime) -> None:
    service = own.schedules()
    for mode in ("none", "latest", "all"):
        service.define("alice", {"name": mode, "operation": "test.noop", "everySeconds": 2, "catchUp": mode})
    ticker = service.ticker()
    wait_until(lambda: ticker.tick_once() and all(ticks_made(service, "alice", m) for m in ("none", "latest", "all")),
               timeout=6, message="a first tick each")
    last = {m: ticks_made(service, "alice", m)[-1] for m in ("none", "latest", "all")}
    time.sleep(10)  # nothing runs: the stop itself
    now = ticker.tick_once().now_ms
    for mode in ("none", "latest", "all"):
        fell = list(range(last[mode] + 2000, now + 1, 2000))  # the ticks that fell during the stop
        on_time = 1 if now - fell[-1] <= 1000 else 0
        new = [t for t in ticks_made(service, "alice", mode) if t > last[mode]]
        assert len(fell) >= 4
        expected = {"none": fell[len(fell) - on_time:], "latest": fell[len(fell) - on_time - 1:], "all": fell}[mode]
        assert new == expected, (mode, now, fell, new)
    # Afterwards each ticks on as before.
    service.pause("alice", "none")
    count = {m: len(ticks_made(service, "alice", m)) for m in ("none", "latest")}
    wait_until(lambda: ticker.tick_once() and len(ticks_made(service, "alice", "latest")) > count["latest"],
               timeout=5, message="the next tick")
    assert len(ticks_made(service, "alice", "none")) == count["none"]  # paused: nothing


def test_the_ticker_sleeps_until_the_earliest_due_schedule_and_no_longer_than_half_a_second(own: Runtime) -> None:
    ticker = own.schedules().ticker()
    assert ticker.wait_s(Pass(now_ms=1_000, next_due_ms=1_200)) == 0.2
    assert ticker.wait_s(Pass(now_ms=1_000, next_due_ms=500)) == 0.0
    assert ticker.wait_s(Pass(now_ms=1_000, next_due_ms=60_000)) == 0.5  # a schedule defined meanwhile
    assert ticker.wait_s(Pass(now_ms=1_000, next_due_ms=None)) == 0.5


def test_ticks_held_by_a_ticker_killed_before_claiming_get_their_jobs(own: Runtime) -> None:
    """A ticker took the due schedule and died before moving it on: the next one, once the lease lapses, makes the
    jobs of the ticks the lease hid, although they are older than the grace."""
    service = own.schedules()
    service.define("alice", {"name": "two", "operation": "test.noop", "everySeconds": 2, "catchUp": "none"})
    tick = service.get("alice", "two").next_ms
    wait_until(lambda: service.store.now_ms() >= tick, timeout=5, message="the first tick")
    _, _, taken = service.store.take_due(500, 5000)  # a ticker takes it, and is killed here
    assert ("alice", "two") in taken
    survivor = service.ticker()
    expected = [tick, tick + 2000, tick + 4000]

    def made_all() -> bool:
        survivor.tick_once()
        return set(expected) <= set(ticks_made(service, "alice", "two"))

    wait_until(made_all, timeout=12, interval=0.1, message=f"the jobs of {expected}")
    made = ticks_made(service, "alice", "two")
    assert len(made) == len(set(made)) and made[:3] == expected, made
    assert own.store.redis.hlen(own.store.keys.schedules_taken()) == 0  # the survivor's settle dropped the record


#: A process that defines a schedule and is killed by SIGKILL as soon as the script that writes it has answered.
DEFINE_AND_DIE = """
import os, signal
from tasks_backend.config import Settings
from tasks_backend.service.runtime import build_runtime
from tasks_backend.store.runner import ScriptRunner

real = ScriptRunner.call

def call(self, name, keys, *args):
    reply = real(self, name, keys, *args)
    if name == "schedules.put":
        os.kill(os.getpid(), signal.SIGKILL)
    return reply

ScriptRunner.call = call
build_runtime(Settings.from_env()).schedules().define(
    "alice", {"name": "kept", "operation": "test.noop", "everySeconds": 1})
"""


def test_a_process_killed_as_its_schedule_is_written_leaves_the_schedule_ticking(own: Runtime) -> None:
    """The schedule and its entry in the due set are written by one script: a web process that dies right after
    it (before answering 201) leaves no schedule that is listed with a next run but never ticks."""
    died = subprocess.run([sys.executable, "-c", DEFINE_AND_DIE], env=settings_env(own.settings), timeout=60,
                          check=False, capture_output=True, text=True)
    assert died.returncode == -signal.SIGKILL, died.stderr
    service = own.schedules()
    assert service.get("alice", "kept") is not None
    ticker = service.ticker()
    wait_until(lambda: ticker.tick_once() and ticks_made(service, "alice", "kept"), timeout=5, interval=0.1,
               message="the first tick's job")


def test_a_schedule_this_host_cannot_work_out_leaves_the_others_to_tick(own: Runtime) -> None:
    """One schedule's ticks cannot be worked out here (say its time zone is missing from this host's tz database):
    the schedules taken with it in the same pass still get their jobs, and it is left for a later pass."""
    service, store = own.schedules(), own.store
    service.define("alice", {"name": "faraway", "operation": "test.noop", "cron": "* * * * *"})
    good, _ = service.define("alice", {"name": "good", "operation": "test.noop", "everySeconds": 1})
    key = store.keys.schedule("alice", "faraway")
    body = json.loads(store.redis.hget(key, "body"))
    store.redis.hset(key, "body", json.dumps({**body, "timezone": "Nowhere/Atlantis"}))
    store.redis.zadd(store.keys.schedules_due(), {member("alice", "faraway"): 0})  # due with the other
    wait_until(lambda: store.now_ms() > good.next_ms, 5, message="the good schedule's first tick")
    done = service.ticker().tick_once()
    assert done.failed == ["faraway"] and done.jobs == 1
    assert ticks_made(service, "alice", "good") == [good.next_ms]
