"""Several hosts: web and worker processes on hosts of their own (network namespaces on a private bridge),
one Redis as store and broker, one address for callers (a balancer in front of the two web hosts).

A host is cut off by taking its link down: its traffic vanishes both ways, with no error to either side,
until the link comes back. The processes are the real ones (`tasks-backend web`, `worker`, `sweeper`),
one sweeper on each worker host, as docs/deploy.md lays them out.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from soak.proxy import Proxy
from soak.services import Downstream
from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import EmbeddedRedis
from tasks_backend.model.domain import JobRecord, JobState
from tasks_backend.service.runtime import Runtime, build_runtime
from tests.conftest import make_settings, show_logs_on_failure, wait_until
from tests.support import netns
from tests.support.procs import Proc, print_logs, sweeper_process, tails, wait_for_http, web_process, worker_process

pytestmark = pytest.mark.chaos
TOKEN = "alice-token"
WEB_PORT = 8000  # every host has its own ports


@dataclass
class Site:
    lan: netns.Lan
    settings: Settings
    runtime: Runtime
    downstream: Downstream
    balancer: Proxy
    ledger: Path
    tmp: Path
    webs: dict[str, tuple[netns.Host, Proc]]
    workers: dict[str, tuple[netns.Host, Proc]]
    procs: list[Proc]

    @property
    def url(self) -> str:
        return f"http://{self.balancer.host}:{self.balancer.port}"

    def caller(self, **kw: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, **kw)

    def worker_host(self, pid: int) -> str:
        return next(name for name, (host, _) in self.workers.items() if host.runs(pid))

    def effects(self, job_id: str) -> list[tuple[str, int]]:
        """(step, pid of the process that applied it), in the order they happened."""
        entries = [json.loads(x) for x in self.ledger.read_text().splitlines()] if self.ledger.exists() else []
        return [(e["step"], e["pid"]) for e in entries if e["job"] == job_id]


def _record(site: Site, job_id: str) -> JobRecord:
    record = site.runtime.store.get(job_id)
    assert record is not None
    return record


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    reason = netns.unavailable()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("hosts")
    procs: list[Proc] = []
    with netns.Lan() as lan:
        redis_server = EmbeddedRedis(host=lan.address, appendonly=False).start()
        downstream = Downstream(host=lan.address)
        # Short leases so that a host cut off loses its job in seconds; the cut-off host's broker connection
        # notices the loss only after TCP keepalive gives up (about 25 s), later than any cut made here.
        settings = make_settings(f"redis://{lan.address}:{redis_server.port}", job_modules=("soak.jobs",),
                                 tokens=f"alice:{TOKEN}", lease_s=1.5, queued_grace_s=1.0, sweep_interval_s=0.2,
                                 visibility_timeout_s=60.0)
        ledger = tmp / "ledger"
        job_env = {"SOAK_LEDGER": str(ledger), "SOAK_DOWNSTREAM": downstream.url}
        balancer: Proxy | None = None
        try:
            webs = {}
            for name in ("ha", "hb"):
                host = lan.add_host(name)
                webs[name] = (host, web_process(settings, tmp / f"web-{name}.log", f"{host.address}:{WEB_PORT}",
                                                host.prefix, TASKS_BACKEND_TOKENS=f"alice:{TOKEN}"))
                procs.append(webs[name][1])
            workers = {}
            for name in ("wa", "wb"):
                host = lan.add_host(name)
                workers[name] = (host, worker_process(settings, tmp / f"worker-{name}.log", prefix=host.prefix,
                                                      **job_env))
                procs += [workers[name][1], sweeper_process(settings, tmp / f"sweeper-{name}.log", host.prefix)]
            # The balancer takes a host out when connecting to it fails or takes over a second.
            balancer = Proxy(upstreams=[(host.address, WEB_PORT) for host, _ in webs.values()], host=lan.address,
                             connect_timeout_s=1.0)
            for host, proc in webs.values():
                wait_for_http(f"http://{host.address}:{WEB_PORT}/readyz", proc.popen, proc.log_path, 90,
                              f"the web process on {host.name}")
            yield Site(lan, settings, build_runtime(settings), downstream, balancer, ledger, tmp, webs, workers, procs)
        except BaseException:
            print_logs(procs)
            raise
        finally:
            for proc in procs:
                proc.stop()
            if balancer is not None:
                balancer.close()
            downstream.close()
            redis_server.stop()


@pytest.fixture
def hosts(site: Site, request: pytest.FixtureRequest) -> Site:
    """The site, with every process's log in the report of a test that fails."""
    show_logs_on_failure(request, lambda: tails(site.procs))
    return site


def test_worker_host_cut_off_mid_job_loses_it_to_another_host_with_every_effect_once(hosts: Site) -> None:
    site = hosts
    gate = site.tmp / "gate"
    with site.caller(timeout=10) as api:
        answer = api.post("/v1/jobs", json={"operation": "soak.steps",
                                            "params": {"steps": 3, "pause": 0, "gate": str(gate)}})
        assert answer.status_code == 202, answer.text
        job_id = answer.json()["taskId"]
        # Step 0 applied and recorded on the first host; the job now waits there before step 1.
        wait_until(lambda: site.runtime.store.recorded_step(job_id, "s0"), 60, message="step 0 to be recorded")
        first = _record(site, job_id)
        name = site.worker_host(site.effects(job_id)[0][1])
        cut_host, cut_worker = site.workers[name]
        other = next(n for n in site.workers if n != name)

        site.lan.cut(cut_host)
        try:
            # Its lease lapses (its renewals no longer arrive) and the other host's sweeper requeues the job.
            resumed = wait_until(lambda: (r := _record(site, job_id)).attempts == 2 and r, 60,
                                 message="the job to be claimed again")
            assert resumed.token > first.token
            for step in (1, 2):
                Path(f"{gate}.{step}").touch()
            wait_until(lambda: api.get(f"/v1/jobs/{job_id}").json()["status"] == "completed", 60,
                       message="completion on the other host")
            done = _record(site, job_id)
        finally:
            site.lan.heal(cut_host)

        # Back on the network, the first host's run carries on with its old token: its lease renewal and
        # its next write are refused, and it stops without changing the job ("lost": told by a renewal or
        # a read; "fenced": by a refused write, if Redis stayed out of reach longer than its writes retry).
        wait_until(lambda: re.search(rf"job {job_id}: (lost|fenced)", cut_worker.output()), 60,
                   message="the cut-off host's run to be fenced out")
        assert _record(site, job_id) == done
        assert done.state is JobState.COMPLETED and done.result == {"steps": 3}
        assert api.get(f"/v1/jobs/{job_id}").json()["status"] == "completed"

    effects = site.effects(job_id)
    assert [step for step, _ in effects] == ["s0", "s1", "s2"]  # each effect ran once: resumed from its record
    assert site.worker_host(effects[0][1]) == name
    assert {site.worker_host(pid) for _, pid in effects[1:]} == {other}
    downstream = {step: keys for (job, step), keys in site.downstream.keys_by_effect.items() if job == job_id}
    assert {step: len(keys) for step, keys in downstream.items()} == {"s0": 1, "s1": 1, "s2": 1}
    assert site.downstream.repeats == 0


def _submit(site: Site, key: str, timeout: float = 10) -> str:
    # A new connection each time, so that the balancer picks a web host for each call.
    with site.caller(timeout=timeout) as api:
        answer = api.post("/v1/jobs", headers={"Idempotency-Key": key},
                          json={"operation": "soak.probe", "params": {}})
        assert answer.status_code in (200, 202), answer.text
        return str(answer.json()["taskId"])


class Connection:
    """One kept-alive connection to the balancer, spoken over by hand: a request left unanswered can still
    have its answer read later, when the host behind it is back."""

    def __init__(self, site: Site) -> None:
        self.sock = socket.create_connection((site.balancer.host, site.balancer.port), timeout=10)

    def send(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> bytes:
        """Send a request's head; returns its body, to send next with `sendall`."""
        data = json.dumps(body).encode() if body is not None else b""
        head = {"Host": "tasks", "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
                "Content-Length": str(len(data)), **(headers or {})}
        lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items()), "", ""]
        self.sock.sendall("\r\n".join(lines).encode())
        return data

    def interim(self) -> bytes:
        """Read an interim answer (`100 Continue`) whole."""
        got = b""
        while not got.endswith(b"\r\n\r\n"):
            chunk = self.sock.recv(1)
            assert chunk, "the connection closed"
            got += chunk
        return got

    def answer(self, timeout: float) -> tuple[int, Any]:
        self.sock.settimeout(timeout)
        response = http.client.HTTPResponse(self.sock)
        response.begin()
        return response.status, json.loads(response.read())

    def close(self) -> None:
        self.sock.close()


def _connection_to(site: Site, host: netns.Host) -> Connection:
    """A connection the balancer gave to `host`."""
    for _ in range(2 * len(site.webs)):
        before = site.balancer.served[(host.address, WEB_PORT)]
        conn = Connection(site)
        conn.sock.sendall(conn.send("GET", "/readyz"))
        assert conn.answer(10)[0] == 200
        if site.balancer.served[(host.address, WEB_PORT)] > before:
            return conn
        conn.close()
    raise AssertionError(f"the balancer never chose {host.name}")


def test_web_host_cut_off_callers_retrying_through_the_other_get_the_same_handles(hosts: Site) -> None:
    site = hosts
    keys = [f"order-{i}-{os.urandom(4).hex()}" for i in range(4)]
    cut_host, _ = site.webs["ha"]
    served_before = site.balancer.served[(cut_host.address, WEB_PORT)]
    handles = {key: _submit(site, key) for key in keys}
    assert site.balancer.served[(cut_host.address, WEB_PORT)] > served_before  # some went through `ha`

    # A caller's request that `ha` has begun to read when `ha` is cut off: its head arrived (`ha` asked for the
    # body with `100 Continue`), its body did not, and it is not answered.
    late_key = f"late-{os.urandom(4).hex()}"
    pinned = _connection_to(site, cut_host)
    try:
        body = pinned.send("POST", "/v1/jobs", {"operation": "soak.probe", "params": {}},
                           {"Idempotency-Key": late_key, "Expect": "100-continue"})
        assert pinned.interim().startswith(b"HTTP/1.1 100")
        site.lan.cut(cut_host)
        try:
            pinned.sock.sendall(body)
            with pytest.raises(TimeoutError):
                pinned.answer(timeout=2)
            # The callers retry, through the same address: the balancer sends them to `hb`.
            assert {key: _submit(site, key) for key in keys} == handles
            late = _submit(site, late_key)
            assert _submit(site, late_key) == late
        finally:
            site.lan.heal(cut_host)
        # The rest of the request reaches `ha` once its link is back: it finds the job the retry made.
        status, answer = pinned.answer(timeout=60)
        assert status == 202 and answer["taskId"] == late, answer
    finally:
        pinned.close()

    handles[late_key] = late
    with site.caller(timeout=10) as api:
        listed = api.get("/v1/jobs", params={"limit": 100}).json()
        mine = [job["taskId"] for job in listed["jobs"] if job["taskId"] in set(handles.values())]
        assert sorted(mine) == sorted(handles.values())  # one job per key, none twice
        for job_id in handles.values():
            wait_until(lambda j=job_id: api.get(f"/v1/jobs/{j}").json()["status"] == "completed", 30,
                       message="every job to run")
