"""The quick fault-injection soak (`make soak QUICK=1`) as part of the suite: the system as deployed, in
separate processes, through every kind of fault; it must keep every promise it checks (exit status 0).

Both brokers' soaks run at once (the store's Redis as the broker, and RabbitMQ in the session's vhost): each waits
mostly on its faults and deadlines, so side by side they take the time of one. Deselect them for quick local runs
with `-m "not soak"`; the suite runs seed 1 unless `SOAK_SEED=n` says otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.soak
@pytest.mark.timeout(420)
def test_quick_soak_keeps_every_promise_on_both_brokers(amqp_url: str) -> None:
    # One fixed schedule in the suite, so that a red run replays exactly; `make soak` draws a new one each time.
    seed = os.environ.get("SOAK_SEED", "1")
    runs = {name: subprocess.Popen([sys.executable, "-m", "soak", "--quick", "--seed", seed, *broker], cwd=ROOT,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for name, broker in (("redis", []), ("rabbitmq", ["--broker", amqp_url]))}
    try:
        outputs = {name: proc.communicate(timeout=390)[0] for name, proc in runs.items()}
    finally:
        for proc in runs.values():
            if proc.poll() is None:
                proc.kill()
    for name, proc in runs.items():
        assert proc.returncode == 0, f"the soak on {name}:\n" + outputs[name][-8000:]
