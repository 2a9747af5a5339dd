"""Schedules declared in a job module are put in place, once, by every sweeper and worker that starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks_backend import schedule
from tasks_backend.running.declared import declared_in
from tasks_backend.service.runtime import build_runtime
from tests.conftest import JOB_MODULES, make_settings, wait_until
from tests.support.procs import sweeper_process

MODULES = (*JOB_MODULES, "tests.support.scheduled_jobs")


def test_a_sweeper_puts_the_declared_schedule_in_place_and_the_next_one_leaves_it(redis_base: str,
                                                                                 tmp_path: Path) -> None:
    settings = make_settings(redis_base, job_modules=MODULES)
    runtime = build_runtime(settings)
    service = runtime.schedules()
    first = sweeper_process(settings, tmp_path / "sweeper.log")
    try:
        made = wait_until(lambda: service.store.get("alice", "declared-nightly"), timeout=15,
                          message="the declared schedule")
    finally:
        first.stop()
    assert made.spec.wire() == {"name": "declared-nightly", "operation": "test.report", "params": {},
                                "cron": "0 3 * * *", "timezone": "Europe/Paris", "catchUp": "none", "priority": 5}
    runtime.declare_schedules()  # another process starting: nothing changes
    assert service.get("alice", "declared-nightly") == made
    assert [s.name for s in service.list("alice")] == ["declared-nightly"]
    edited = schedule("declared-nightly", "test.report", cron="0 4 * * *", timezone="Europe/Paris", owner="alice")
    service.declare([edited])  # the code changed: the code wins
    assert service.get("alice", "declared-nightly").spec.cron == "0 4 * * *"


def test_declarations_are_found_in_the_job_modules_and_need_an_owner() -> None:
    assert [d.name for d in declared_in(MODULES)] == ["declared-nightly"]
    with pytest.raises(ValueError, match="owner"):
        schedule("x", "test.noop", every=5, owner="a:b")
