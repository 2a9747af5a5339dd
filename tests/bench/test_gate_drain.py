"""The gate's drain bench (`bench.gate_drain`) on a real Redis: what it measures is the gate's real drain, each held
job released once, in submission order, one per run that ends; and a lone owner's, sent past the gate."""

from __future__ import annotations

import secrets

import pytest

from bench import gate_drain
from tests.conftest import single_redis


@pytest.mark.parametrize("lone", [False, True], ids=["held", "lone"])
def test_the_drain_releases_every_job_once_in_order_and_is_measured(redis_base: str, lone: bool) -> None:
    suffix = secrets.token_hex(4)
    runtime = gate_drain.runtime_on(f"{single_redis(redis_base)}/12", slots=2, key_prefix=f"drain{suffix}",
                                    queue=f"drain{suffix}")
    drained = gate_drain.drain(runtime, 40, lone=lone)
    assert len(drained.popped) == 40 and len(set(drained.popped)) == 40  # each popped message checked in turn
    held = runtime.service.admission.call()
    assert held.push is not None
    where = [w for w, _ in runtime.store.gate_where(held, drained.popped)]
    assert where == [None] * 40  # every run's end left the gate
    assert runtime.store.redis.zcard(held.key("ready")) == 0 and runtime.store.redis.zcard(held.key("flight")) == 0
    assert runtime.store.redis.llen(held.push[0]) == 0 and runtime.store.redis.llen(held.push[3]) == 0
    assert drained.script_us > 0
    empty = gate_drain.empty_calls(runtime, 40)
    assert 0 < empty.script_us < drained.script_us
