"""The gate's drain bench (`bench.gate_drain`) on a real Redis: what it measures is the gate's real drain, each held
job released once, in submission order, one per run that ends."""

from __future__ import annotations

import secrets

from bench import gate_drain
from tests.conftest import single_redis


def test_the_drain_releases_every_held_job_once_in_order_and_is_measured(redis_base: str) -> None:
    suffix = secrets.token_hex(4)
    runtime = gate_drain.runtime_on(f"{single_redis(redis_base)}/12", slots=2, key_prefix=f"drain{suffix}",
                                    queue=f"drain{suffix}")
    drained = gate_drain.drain(runtime, 40)
    assert len(drained.popped) == 40 and len(set(drained.popped)) == 40  # each popped message checked in turn
    held = runtime.service.admission.call()
    assert runtime.store.redis.zcard(held.key("ready")) == 0 and runtime.store.redis.zcard(held.key("flight")) == 0
    assert runtime.store.redis.llen(held.push[0]) == 0  # type: ignore[index]
    assert drained.script_us > 0
    empty = gate_drain.empty_calls(runtime, 40)
    assert 0 < empty.script_us < drained.script_us
