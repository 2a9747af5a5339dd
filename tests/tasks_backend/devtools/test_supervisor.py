"""The supervisor behind `tasks-backend run`, on real child processes with short delays."""

from __future__ import annotations

import itertools
import logging
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tasks_backend.devtools.supervisor import Supervisor, describe
from tests.conftest import wait_until


def python(code: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code, *args])


def delays(caplog: pytest.LogCaptureFixture) -> list[float]:
    found = (re.search(r"restarting it in ([\d.]+)s", r.getMessage()) for r in caplog.records)
    return [float(m.group(1)) for m in found if m]


def test_a_child_that_keeps_dying_is_restarted_with_a_doubling_delay(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="tasks_backend.devtools.supervisor")
    sup = Supervisor(first_delay_s=0.2, max_delay_s=0.8, stable_after_s=60, poll_s=0.02)
    starts: list[float] = []

    def spawn() -> subprocess.Popen[bytes]:
        starts.append(time.monotonic())
        return python("import sys; sys.exit(3)")

    child = sup.add("flaky", spawn)
    try:
        wait_until(lambda: sup.check() or len(starts) >= 5, 30, message="five starts")
    finally:
        sup.stop_all()
    assert delays(caplog)[:4] == [0.2, 0.4, 0.8, 0.8]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(gap >= delay for gap, delay in zip(gaps, [0.2, 0.4, 0.8, 0.8], strict=True))
    assert child.restarts == 4
    first = next(r.getMessage() for r in caplog.records if "exited" in r.getMessage())
    assert re.fullmatch(r"flaky \(pid \d+\) exited with status 3 after [\d.]+s; restarting it in 0.2s", first)
    assert any(r.getMessage().startswith("flaky restarted (pid ") for r in caplog.records)


def test_the_delay_starts_again_once_a_child_has_stayed_up(caplog: pytest.LogCaptureFixture,
                                                          tmp_path: Path) -> None:
    caplog.set_level(logging.WARNING, logger="tasks_backend.devtools.supervisor")
    sup = Supervisor(first_delay_s=0.1, max_delay_s=5, stable_after_s=1.0, poll_s=0.02)
    release = tmp_path / "release"
    # Each child lives until the test lets it go.
    code = ("import os, sys, time\n"
            "while not os.path.exists(sys.argv[1]): time.sleep(0.01)\n"
            "os.remove(sys.argv[1]); sys.exit(1)")
    child = sup.add("steady", lambda: python(code, str(release)))

    def let_go() -> None:
        exits = len(delays(caplog))
        release.touch()
        wait_until(lambda: sup.check() or len(delays(caplog)) > exits, 20, message="the child to exit")

    try:
        let_go()
        wait_until(lambda: sup.check() or child.restarts == 1, 20, message="a restart")
        let_go()  # at once: still failing, the delay doubles
        wait_until(lambda: sup.check() or child.restarts == 2, 20, message="another restart")
        wait_until(lambda: time.monotonic() - child.started_at > 1.2, 5, message="the child to stay up")
        let_go()
    finally:
        release.unlink(missing_ok=True)
        sup.stop_all()
    assert delays(caplog) == [0.1, 0.2, 0.1]


def test_stop_ends_every_child_and_the_one_marked_last_after_the_others(tmp_path: Path) -> None:
    """The others take a while to stop (as a worker finishing its jobs does); the last waits for them."""
    code = ("import pathlib, signal, sys, time\n"
            "name, linger, out = sys.argv[1], float(sys.argv[2]), pathlib.Path(sys.argv[3])\n"
            "def bye(*_):\n"
            "    time.sleep(linger)\n"
            "    with (out / 'order').open('a') as f: f.write(name + '\\n')\n"
            "    sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, bye)\n"
            "(out / name).touch()\n"
            "while True: time.sleep(0.05)\n")
    sup = Supervisor(poll_s=0.02)
    store = sup.add("store", lambda: python(code, "store", "0", str(tmp_path)), stop_last=True)
    others = [sup.add(name, lambda name=name: python(code, name, "0.3", str(tmp_path))) for name in ("web", "worker")]
    wait_until(lambda: all((tmp_path / n).exists() for n in ("store", "web", "worker")), 20,
               message="the children to be ready")
    runner = threading.Thread(target=sup.run)
    runner.start()
    sup.stopping.set()
    runner.join(30)
    assert not runner.is_alive()
    assert all(c.proc is not None and c.proc.poll() is not None for c in [store, *others])
    order = (tmp_path / "order").read_text().split()
    assert order[-1] == "store" and sorted(order[:2]) == ["web", "worker"]


def test_exit_statuses_are_described_as_a_person_reads_them() -> None:
    assert describe(0) == "status 0"
    assert describe(2) == "status 2"
    assert describe(-signal.SIGKILL) == "signal SIGKILL"


def test_a_child_that_does_not_stop_is_killed_at_its_time_and_a_second_signal_kills_at_once(
        caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """Stages stop in order, each child within its own time; a second stop signal stops waiting."""
    caplog.set_level(logging.INFO, logger="tasks_backend.devtools.supervisor")
    stubborn = ("import pathlib, signal, sys, time\n"
                "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "pathlib.Path(sys.argv[1]).touch()\n"
                "while True: time.sleep(0.05)\n")
    sup = Supervisor(poll_s=0.02)
    first = sup.add("first", lambda: python(stubborn, str(tmp_path / "first")), stop_timeout_s=0.5)
    second = sup.add("second", lambda: python(stubborn, str(tmp_path / "second")), stage=1, stop_timeout_s=600)
    wait_until(lambda: (tmp_path / "first").exists() and (tmp_path / "second").exists(), 20,
               message="the children to ignore SIGTERM")
    stopper = threading.Thread(target=sup.stop_all)
    stopper.start()
    wait_until(lambda: any(r.getMessage().startswith("first (pid") for r in caplog.records), 20,
               message="the first stage to end")
    sup._on_signal()  # the first Ctrl-C (stopping already set by run) ...
    sup._on_signal()  # ... and the second: the 600 s of the second stage are not waited out
    stopper.join(20)
    assert not stopper.is_alive()
    lines = [r.getMessage() for r in caplog.records]
    assert re.fullmatch(r"first \(pid \d+\) killed: it had not stopped [\d.]+s after SIGTERM", lines[0])
    assert re.fullmatch(r"second \(pid \d+\) killed: it had not stopped [\d.]+s after SIGTERM", lines[1])
    assert first.proc is not None and first.proc.returncode == -signal.SIGKILL
    assert second.proc is not None and second.proc.returncode == -signal.SIGKILL
