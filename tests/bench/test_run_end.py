"""The run-end bench (`bench.run_end`) on a real Redis: fair shares on, a lone owner's runs past the slots end the
short way and every job completes; fair shares off, none enters the gate."""

from __future__ import annotations

import secrets

import pytest

from bench import gate_drain, run_end
from tasks_backend.model.domain import JobState
from tests.conftest import single_redis


@pytest.mark.parametrize("fair", [True, False], ids=["on", "off"])
def test_a_lone_owners_run_ends_are_measured_the_short_way_with_fair_shares_on(redis_base: str, fair: bool) -> None:
    name = f"ends{secrets.token_hex(4)}"
    runtime = gate_drain.runtime_on(f"{single_redis(redis_base)}/12", 2, fair=fair, key_prefix=name, queue=name)
    ended = run_end.ends(runtime, 30)
    # The first two went to the slots and end the full way (the first tried the short way, refused); the third is
    # the first bypassed job, ended the full way by the guess the first two left, which it turns back.
    assert ended.short == (30 - 3 if fair else 0)
    assert ended.script_us > 0 and ended.python_us > 0
    jobs = runtime.store.redis.zrange(runtime.store.keys.owner_index("bench"), 0, -1)
    assert len(jobs) == 30 and runtime.store.states_of(jobs) == [JobState.COMPLETED] * 30
    if fair:
        call = runtime.service.admission.call()
        assert [w for w, _ in runtime.store.gate_where(call, jobs)] == [None] * 30
    runtime.store.redis.delete(*runtime.store.redis.keys(f"{name}*"))
