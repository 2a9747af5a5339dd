"""`tasks-backend run` (what `make run` calls): the whole system from nothing, served end to end."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import free_port
from tests.conftest import wait_until
from tests.support.procs import ROOT, service_pids, session_pids
from tests.support.sentinel import SERVICE, SentinelGroup


def test_run_serves_a_demo_job_with_an_embedded_redis(tmp_path: Path) -> None:
    """... and keeps serving when a process dies, the embedded Redis included; SIGTERM stops them all."""
    port, flower_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TASKS_BACKEND_", "FLOWER_", "REDIS_URL", "CELERY_BROKER_URL"))}
    env.update({"PORT": str(port), "FLOWER_PORT": str(flower_port), "LOG_FORMAT": "text"})
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tasks_backend.cli", "run", "--data-dir",
                                 str(tmp_path / "data")], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        token = wait_until(lambda: (m := re.search(r"export TASKS_BACKEND_TOKEN=(\S+)", log.read_text()))
                           and m.group(1), 60, message="the banner with a development token")
        base = f"http://127.0.0.1:{port}"
        # The banner comes once every child answers, so the web app serves at once, and it is not buried in
        # what only a deployment's operators need: Celery's banner, its root warning, Flower's inspect failures.
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200
        text = log.read_text()
        assert text.count("tasks-backend is ready on") == 1
        assert f"  export TASKS_BACKEND_URL={base}\n" in text
        assert re.search(r"\n  export REDIS_URL=redis://127\.0\.0\.1:\d+/0\n", text)
        assert re.search(r"\n  source \S+/bin/activate\n", text)
        for noise in ("-------------- celery@", "SecurityWarning", "Inspect method"):
            assert noise not in text
        headers = {"Authorization": f"Bearer {token}"}
        job = httpx.post(f"{base}/v1/jobs", json={"operation": "demo.sleep", "params": {"seconds": 0.2}},
                         headers=headers, timeout=10)
        assert job.status_code == 202
        location = base + job.headers["Location"]
        wait_until(lambda: httpx.get(location, headers=headers, timeout=5).json()["status"] == "completed", 60,
                   interval=0.2, message="the demo job to complete")
        assert httpx.get(location + "/result", headers=headers, timeout=5).json() == {"slept": 0.2}
        assert httpx.get(f"http://127.0.0.1:{flower_port}/api/tasks", timeout=5).status_code == 401

        # A child that dies is started again, the embedded Redis too: on its port, with its data (AOF).
        aof = tmp_path / "data" / "redis"
        wait_until(lambda: any(location.rsplit("/", 1)[-1].encode() in f.read_bytes() for f in aof.rglob("*.aof*")),
                   10, message="the job in the AOF")
        for name in ("worker", "redis"):
            pid = service_pids(proc.pid)[name]
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda name=name, pid=pid: re.search(
                rf"{name} \(pid {pid}\) exited with signal SIGKILL after [\d.]+s; restarting it in 1s.*\n"
                rf"(.*\n)*.*{name} restarted \(pid \d+", log.read_text()), 30, message=f"{name} to be restarted")
            wait_until(lambda: _get(location, headers) == "completed", 30, message="the job, still there")
            again = httpx.post(f"{base}/v1/jobs", json={"operation": "demo.sleep", "params": {"seconds": 0}},
                               headers=headers, timeout=10).headers["Location"]
            wait_until(lambda again=again: _get(base + again, headers) == "completed", 60, interval=0.2,
                       message=f"a new job after {name} was restarted")
    finally:
        proc.send_signal(signal.SIGTERM)  # as Ctrl-C would: the supervisor stops everything it started
        try:
            proc.wait(60)
        finally:
            leftovers = _group_alive(proc.pid)
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert not leftovers, "processes outlived `tasks-backend run`"
    assert (tmp_path / "data" / "redis").is_dir()


def test_run_refuses_a_port_in_use(tmp_path: Path) -> None:
    """A taken port is named before anything starts (no token, no Redis), and the exit status says so."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKS_BACKEND_", "REDIS_URL"))}
        env.update({"PORT": str(port), "FLOWER_PORT": str(free_port())})
        done = subprocess.run([sys.executable, "-m", "tasks_backend.cli", "run", "--data-dir", str(tmp_path / "data")],
                              cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert re.fullmatch(rf"port {port} is in use; set PORT=<a free port> \(for example PORT=\d+\)\n", done.stderr)
    assert done.stdout == ""
    assert not (tmp_path / "data").exists()


def _get(url: str, headers: dict[str, str]) -> str | None:
    try:
        reply = httpx.get(url, headers=headers, timeout=5)
    except httpx.TransportError:
        return None
    return str(reply.json()["status"]) if reply.status_code == 200 else None


def _group_alive(sid: int) -> bool:
    """Whether anything of the session `run` was started in outlived it (its children each have a process group
    of their own); what did is killed."""
    try:
        wait_until(lambda: not session_pids(sid), 30, interval=0.1, message="the session to exit")
    except AssertionError:
        for pid in session_pids(sid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return True
    return False


def test_the_pasted_block_exports_a_token_only_when_there_is_one_to_paste() -> None:
    """... and that is only the one `run` made: the user's own tokens are theirs to paste, never printed."""
    from tasks_backend.cli.run import Banner, connection_exports

    common = {"port": "8000", "flower_port": "5555", "flower_auth": "admin:pw",
              "redis_url": "redis://127.0.0.1:6379/0", "redis_source": None,
              "exports": connection_exports({"REDIS_URL": "redis://127.0.0.1:6379/0", "PATH": "/bin"}, {"REDIS_URL"})}
    shown = Banner(token="s3cret", **common).render(1.0)
    assert "\n  export TASKS_BACKEND_TOKEN=s3cret\n" in shown
    assert "\n  export REDIS_URL=redis://127.0.0.1:6379/0\n" in shown
    # The user's tokens (static, a file or JWTs): a line that does nothing when pasted, rather than one bash cannot
    # parse, saying which token to put there.
    assert "\n  # export TASKS_BACKEND_TOKEN=<a token of yours>\n" in Banner(token=None, **common).render(1.0)
    assert "\n  # export TASKS_BACKEND_TOKEN=<one of your TASKS_BACKEND_TOKENS>\n" in Banner(
        token=None, token_hint="one of your TASKS_BACKEND_TOKENS", **common).render(1.0)


def _block(text: str) -> str | None:
    """The block the banner says to paste, once it is whole (children may log after it)."""
    found = re.search(r"\nIn another terminal, in this directory, paste:\n\n(.*?\n)\n", text, re.DOTALL)
    return found.group(1) if found else None


def _paste(block: str, shell_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The banner's block pasted into a shell whose environment is `shell_env` (the `export` lines; activating
    the environment is left out); it prints what the shell then has."""
    exports = "\n".join(line for line in block.splitlines() if line.strip().startswith("export "))
    return subprocess.run(["bash", "-c", f"set -e\n{exports}\nenv -0"], env=shell_env, capture_output=True,
                          text=True, timeout=10)


def _pasted(block: str, shell_env: dict[str, str] | None = None) -> dict[str, str]:
    """What a shell has after the banner's block is pasted into it (a shell with only PATH unless told)."""
    shell = _paste(block, shell_env or {"PATH": os.environ["PATH"]})
    assert shell.returncode == 0 and not shell.stderr, shell.stderr
    return dict(item.split("=", 1) for item in shell.stdout.split("\0") if "=" in item)


def test_the_pasted_block_gives_another_shell_the_same_system() -> None:
    """Every variable that says which system an application reaches is in the block: the ones the user gave
    `run` by name only (a broker URL holds a password, and whatever `run` prints lands in a CI log or a
    journal), so that a shell of the user's keeps its own and a shell without them stops, naming the one it
    lacks; what `run` made is exported as it is."""
    from tasks_backend.cli.run import Banner, connection_exports

    given = {"TASKS_BACKEND_REDIS_SENTINELS": "127.0.0.1:26379,127.0.0.1:26380",
             "TASKS_BACKEND_REDIS_SERVICE": "jobs", "REDIS_URL": "redis://ignored:6379/0",
             "CELERY_BROKER_URL": "amqp://app:p&ss w;rd@127.0.0.1:5672//", "TASKS_BACKEND_KEY_PREFIX": "tb2",
             "TASKS_BACKEND_QUEUE": "jobs2", "TASKS_BACKEND_JOBS": "myapp.jobs,demo.jobs", "PORT": "8000"}
    shown = Banner(port="8000", flower_port="5555", token="t0k", flower_auth="admin:pw",
                   redis_url=Settings.from_env(given).redis_url, redis_source="TASKS_BACKEND_REDIS_SENTINELS",
                   exports=connection_exports(given)).render(1.0)
    block = _block(shown + "\n") or ""  # printed with click.echo's newline
    assert "p&ss w;rd" not in shown
    assert "REDIS_URL" not in block  # the Sentinels replace it; a stale one would only mislead
    # Not the job modules: an application in that shell may not import them (they live in the server's folder).
    assert "TASKS_BACKEND_JOBS" not in block
    names = ("TASKS_BACKEND_REDIS_SENTINELS", "TASKS_BACKEND_REDIS_SERVICE", "CELERY_BROKER_URL",
             "TASKS_BACKEND_KEY_PREFIX", "TASKS_BACKEND_QUEUE")
    for name in names:
        assert name in block and given[name] not in block
    # A shell of the user's (a profile sets these in every terminal, or the user exports them again) keeps them.
    pasted = _pasted(block, {"PATH": os.environ["PATH"], **{name: given[name] for name in names}})
    for name in names:
        assert pasted[name] == given[name]
    assert pasted["TASKS_BACKEND_URL"] == "http://127.0.0.1:8000" and pasted["TASKS_BACKEND_TOKEN"] == "t0k"
    assert Settings.from_env(pasted).redis_url == Settings.from_env(given).redis_url
    # A shell without them stops at the first it lacks, and says so, rather than reach another system.
    bare = _paste(block, {"PATH": os.environ["PATH"]})
    assert bare.returncode != 0
    assert "TASKS_BACKEND_REDIS_SENTINELS: set it as you did for tasks-backend run" in bare.stderr


def test_run_with_sentinels_serves_a_job_an_application_submits_from_the_pasted_block(tmp_path: Path) -> None:
    """No embedded Redis when Sentinels are set: every child finds the primary through them, and an application
    in a shell of the user's that pasted the block submits through `connect_service()` to the same system."""
    group = SentinelGroup(tmp_path / "sentinel").start()
    port, flower_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TASKS_BACKEND_", "FLOWER_", "REDIS_URL", "CELERY_BROKER_URL"))}
    env.update({"PORT": str(port), "FLOWER_PORT": str(flower_port), "LOG_FORMAT": "text",
                "TASKS_BACKEND_REDIS_SENTINELS": group.addresses, "TASKS_BACKEND_REDIS_SERVICE": SERVICE,
                "TASKS_BACKEND_KEY_PREFIX": "tbrun"})
    log = tmp_path / "run.log"
    try:
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "tasks_backend.cli", "run", "--data-dir",
                                     str(tmp_path / "data")],
                                    cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            block = wait_until(lambda: _block(log.read_text()), 90, message="the banner's block")
            # The user's other terminal has the settings they gave `run`; the block adds the URL and the token.
            pasted = _pasted(block, {"PATH": os.environ["PATH"], **{name: env[name] for name in (
                "TASKS_BACKEND_REDIS_SENTINELS", "TASKS_BACKEND_REDIS_SERVICE", "TASKS_BACKEND_KEY_PREFIX")}})
            assert not (tmp_path / "data").exists()  # no embedded Redis was started
            submit = subprocess.run([sys.executable, "-c", _SUBMIT], cwd=ROOT, capture_output=True, text=True,
                                    env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), **pasted}, timeout=60)
            assert submit.returncode == 0, submit.stderr
            assert submit.stdout.split() == ["completed", "0.1"]
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            finally:
                _group_alive(proc.pid)
        assert proc.returncode == 0, log.read_text()[-3000:]
    finally:
        group.stop()


#: An application in the shell that pasted the block: it submits in process and waits for a worker of `run`.
_SUBMIT = """
from tasks_backend import Principal, connect_service
service = connect_service()
me = Principal("app")
record, _ = service.submit(me, "demo.sleep", {"seconds": 0.1})
done = service.wait(me, record.id, timeout_s=45)
print(done.state, done.result["slept"])
"""
