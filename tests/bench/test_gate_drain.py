"""The gate's drain bench (`bench.gate_drain`) on a real Redis: what it measures is the gate's real drain, each held
job released once, in submission order, one per run that ends; and a lone owner's, sent past the gate."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import pytest

from bench import gate_drain
from tests.conftest import single_redis


def counting(calls: list[str], call: Callable[..., Any]) -> Callable[..., Any]:
    def counted(name: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return call(name, *args, **kwargs)
    return counted


@pytest.mark.parametrize("lone", [False, True], ids=["held", "lone"])
def test_the_drain_releases_every_job_once_in_order_and_is_measured(redis_base: str, lone: bool,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    suffix = secrets.token_hex(4)
    runtime = gate_drain.runtime_on(f"{single_redis(redis_base)}/12", slots=2, key_prefix=f"drain{suffix}",
                                    queue=f"drain{suffix}")
    scripts: list[str] = []
    monkeypatch.setattr(runtime.store.scripts, "call", counting(scripts, runtime.store.scripts.call))
    drained = gate_drain.drain(runtime, 40, lone=lone)
    assert scripts.count("gate.leave") == 40  # one run's end each, in the measured span
    assert len(drained.popped) == 40 and len(set(drained.popped)) == 40  # each popped message checked in turn
    held = runtime.service.admission.call()
    assert held.push is not None
    where = [w for w, _ in runtime.store.gate_where(held, drained.popped)]
    assert where == [None] * 40  # every run's end left the gate
    assert runtime.store.redis.zcard(held.key("ready")) == 0 and runtime.store.redis.zcard(held.key("flight")) == 0
    assert runtime.store.redis.llen(held.push[0]) == 0 and runtime.store.redis.llen(held.push[3]) == 0
    # Redis's time in scripts is read off the whole server, which the other tests share: each measure is taken,
    # and the baseline makes as many script calls as the drain (how the two compare is the bench's to say).
    empty_scripts: list[str] = []
    monkeypatch.setattr(runtime.store.redis, "evalsha", counting(empty_scripts, runtime.store.redis.evalsha))
    empty = gate_drain.empty_calls(runtime, 40)
    assert len(empty_scripts) == 40
    assert drained.script_us > 0 and empty.script_us > 0
