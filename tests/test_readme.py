"""The README's console examples, run in order on a fresh clone, print what the README shows.

The clone is of the committed tree. `make run` is run as the README says (its own install step included,
into the clone's own `.venv`), in the background as in a first terminal; every other command runs in one
shell, as in a second terminal, so what one command sets (the activated environment, exports, `ID=...`)
the next ones see. Ports are the only thing changed: the README's 8000, 5555, 8099 and 5599 become free
ports in the commands, and back in what they print, so that the run fits a busy machine.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tasks_backend.devtools.embedded import free_port
from tests.support.console import ELLIPSIS, Step, console_steps, fill, first_mismatch, match_lines
from tests.support.procs import ROOT

#: Commands that keep running (a first terminal); the rest run one after another in a shell.
SERVERS = ("make run", "honcho start")
#: Ports the README names, each given a free one for the run.
README_PORTS = ("8000", "5555", "8099", "5599")
#: Whatever a step may take, the install in `make run` included.
STEP_TIMEOUT_S = 240.0
SENTINEL = "__step_done__"


class Shell:
    """One bash reading commands from a pipe, stdout and stderr together, as a terminal shows them."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=cwd, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self.run("set -m")  # background commands get process groups of their own, to be stopped as a whole

    def run(self, command: str, timeout: float = STEP_TIMEOUT_S) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        # A command never reads the commands that follow it; `{ }` keeps `source`, `export` and `ID=` here.
        # `(exit $rc)` hands the command's status on, for an `echo $?` that follows.
        self.proc.stdin.write(f"{{ {command}\n}} < /dev/null\n__rc=$?; printf '\\n{SENTINEL} %s\\n' $__rc; "
                              "(exit $__rc)\n".encode())
        self.proc.stdin.flush()
        out = b""
        deadline = time.monotonic() + timeout
        marker = f"\n{SENTINEL} ".encode()
        while marker not in out or not out.endswith(b"\n"):
            left = deadline - time.monotonic()
            assert left > 0, f"`{command}` did not finish within {timeout}s; printed so far:\n{out.decode()}"
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                assert chunk, f"the shell ended during `{command}`:\n{out.decode()}"
                out += chunk
        return out[: out.rindex(marker)].decode(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


class Background:
    """A command started from the shell with `&` (it sees the shell's environment), its output in a file."""

    def __init__(self, shell: Shell, command: str, log: Path) -> None:
        self.log = log
        self.pid = int(shell.run(f"{command} > {log} 2>&1 &\necho $!").strip().splitlines()[-1])

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def stop(self) -> None:
        """As Ctrl-C in its terminal would: the whole group is asked to stop, then made to."""
        for sig, wait_s in ((signal.SIGTERM, 60.0), (signal.SIGKILL, 10.0)):
            if not self.alive():
                return
            os.killpg(self.pid, sig)
            deadline = time.monotonic() + wait_s
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.1)


def _clean_env(home: Path) -> dict[str, str]:
    """A new user's shell: none of this project's settings, no environment activated."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TASKS_BACKEND_", "FLOWER_", "CELERY_", "PYTEST", "VIRTUAL_ENV", "WEB_"))
           and k not in ("REDIS_URL", "PORT", "LOG_FORMAT", "LOG_LEVEL", "PYTHONPATH", "MAKEFLAGS", "MAKELEVEL")}
    venv_bins = {str(Path(p)) for p in env.get("PATH", "").split(os.pathsep) if Path(p, "activate").exists()}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if str(Path(p)) not in venv_bins)
    env["PS1"] = "$ "
    return env


@pytest.mark.timeout(600)
def test_readme_console_examples_run_as_shown(tmp_path: Path) -> None:
    clone = tmp_path / "tasks-backend"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    readme = (clone / "README.md").read_text()
    steps = console_steps(readme)
    assert steps and steps[0].command == "make run", "the README starts with `make run`"
    for script in sorted({m for step in steps for m in re.findall(r"examples/\w+\.py", step.command)}):
        assert f"```python\n{(clone / script).read_text()}```" in readme, f"README.md shows {script} as it is"
    for venv in (".venv-mcp26", ".venv-mcp25"):
        # The MCP client environments `make test` built from the same pins: `make mcp-clients` in the clone
        # runs its own install step over them (the pins are the same, so pip finds everything in place).
        if (ROOT / venv / ".installed").exists():
            (clone / venv).symlink_to(ROOT / venv)
    ports = {name: str(free_port()) for name in README_PORTS}

    def to_here(command: str) -> str:
        return re.sub(r"\b(" + "|".join(README_PORTS) + r")\b", lambda m: ports[m.group(1)], command)

    def as_shown(text: str) -> str:
        for shown, real in ports.items():
            text = re.sub(rf"\b{real}\b", shown, text)
        return text

    shell = Shell(clone, _clean_env(tmp_path))
    servers: list[Background] = []
    values: dict[str, str] = {}
    durations: list[tuple[float, str]] = []
    try:
        for number, step in enumerate(steps):
            command = fill(to_here(step.command), values)
            where = f"README.md line {step.line}: $ {step.command}"
            if command.startswith(SERVERS):
                if command == "make run":  # the ports it uses by default, given free ones as the README says
                    command = f"PORT={ports['8000']} FLOWER_PORT={ports['5555']} {command}"
                server = Background(shell, command, tmp_path / f"server-{number}.log")
                servers.append(server)
                values.update(_wait_for_output(server, step, as_shown, where))
                if step.command == "make run":  # it installs what running needs, and no more
                    assert (clone / ".venv/bin/tasks-backend").exists()
                    assert not (clone / ".venv/bin/pytest").exists()
            else:
                started = time.monotonic()
                printed = as_shown(shell.run(command)).splitlines()
                durations.append((time.monotonic() - started, step.command.splitlines()[0]))
                found = match_lines(step.shown, printed)
                assert found is not None, f"{where}\n{first_mismatch(step.shown, printed)}"
                values.update(found)
    finally:
        for server in reversed(servers):
            server.stop()
        shell.close()
        print("slowest steps:", *(f"{s:6.1f}s  {c}" for s, c in sorted(durations, reverse=True)[:8]), sep="\n")
    leftovers = [s.pid for s in servers if s.alive()]
    assert not leftovers, f"process groups outlived their Ctrl-C: {leftovers}"
    # What a walkthrough writes in the checkout is ignored by git: nothing of it can be committed by mistake.
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone, check=True,
                            capture_output=True, text=True).stdout.splitlines()
    left = [line for line in status if line[3:].rstrip("/") not in (".venv-mcp26", ".venv-mcp25")]
    assert left == [], "following the README left files that git does not ignore:\n" + "\n".join(left)


def _wait_for_output(server: Background, step: Step, as_shown: object, where: str) -> dict[str, str]:
    """Wait until what the server printed so far starts as the README shows (more may follow)."""
    assert callable(as_shown)
    pattern = [*step.shown, ELLIPSIS]
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while True:
        printed = str(as_shown(server.output())).splitlines()
        found = match_lines(pattern, printed)
        if found is not None:
            return found
        assert server.alive(), f"{where}: it exited\n{first_mismatch(step.shown, printed)}"
        assert time.monotonic() < deadline, f"{where}: not shown within {STEP_TIMEOUT_S}s\n" \
                                            f"{first_mismatch(step.shown, printed)}"
        time.sleep(0.5)
