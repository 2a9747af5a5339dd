"""Push delivery shared fairly between owners: one owner's configs pointing at a receiver that accepts
connections and never answers do not hold up another owner's notifications.

Real Redis, the app over HTTP, `tasks-backend worker` in its own process (push delivery installed as in
production, default timeout and concurrency), real receivers on loopback sockets."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from werkzeug.serving import make_server

from adapters.a2a.push import FORMAT, normalize_config
from adapters.app import create_app
from tasks_backend.access.auth import Principal
from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import free_port
from tasks_backend.devtools.receivers import NeverAnswers, Receiver
from tasks_backend.model.domain import JobState
from tasks_backend.push.fair import Breakers, FairPool, target_of
from tasks_backend.push.subscriptions import PushStore
from tasks_backend.service.runtime import Runtime, build_runtime
from tests.adapters.a2a.test_a2a import rpc
from tests.conftest import make_settings, wait_until
from tests.support.procs import Proc, worker_process

#: The attack of the issue, in full (`bench.push_fair` measures it over HTTP for the docs).
ATTACK_JOBS = 500
CONFIGS_PER_JOB = 10


@pytest.fixture(scope="module")
def fair_settings(redis_base: str, token_file: Path) -> Settings:
    """Its own key prefix and queue, so the worker below serves only this module's jobs."""
    return make_settings(redis_base, tokens_file=str(token_file), push_allow_private=True,
                         public_url=f"http://127.0.0.1:{free_port()}")


@pytest.fixture(scope="module")
def fair_runtime(fair_settings: Settings) -> Runtime:
    return build_runtime(fair_settings)


@pytest.fixture(scope="module")
def fair_url(fair_settings: Settings, fair_runtime: Runtime) -> Iterator[str]:
    port = int(fair_settings.public_url.rsplit(":", 1)[1])
    server = make_server("127.0.0.1", port, create_app(runtime=fair_runtime), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield fair_settings.public_url
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def fair_worker(fair_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    log = tmp_path_factory.mktemp("push-fair") / "worker.log"
    proc = worker_process(fair_settings, log, pool="threads", concurrency=2, TASKS_BACKEND_PUSH_ALLOW_PRIVATE="1")
    try:
        yield proc
    finally:
        proc.stop()


def _park_jobs_with_configs(runtime: Runtime, owner: Principal, url: str) -> list[str]:
    """`ATTACK_JOBS` jobs parked for input, each with `CONFIGS_PER_JOB` configs posting to `url`."""
    push = PushStore(runtime.store)
    records = [runtime.service.submit(owner, "test.form", {})[0] for _ in range(ATTACK_JOBS)]
    for record in records:
        for n in range(CONFIGS_PER_JOB):
            config = normalize_config({"id": f"c{n}", "url": f"{url}/{n}"}, record.id)
            push.put(record, config, after="0-0", format=FORMAT)
    return [r.id for r in records]


def _parked(runtime: Runtime, owner: Principal, job_ids: list[str]) -> bool:
    return all(runtime.service.get(owner, j).state is JobState.INPUT_REQUIRED for j in job_ids)


A2A_STATE = {"queued": "TASK_STATE_SUBMITTED", "running": "TASK_STATE_WORKING",
             "input_required": "TASK_STATE_INPUT_REQUIRED", "completed": "TASK_STATE_COMPLETED"}


def _runs(states: list[str]) -> list[str]:
    """The states with each run of one state counted once (delivery is at least once)."""
    return [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]


def test_another_owners_notifications_arrive_at_once_and_in_order_while_one_owner_floods_a_silent_receiver(
        fair_url: str, fair_worker: Proc, fair_runtime: Runtime, tmp_path: Path) -> None:
    silent = NeverAnswers()
    healthy = Receiver()
    attacker = Principal("alice")
    try:
        attack = _park_jobs_with_configs(fair_runtime, attacker, silent.url)
        wait_until(lambda: _parked(fair_runtime, attacker, attack), 120, interval=0.5, message="the jobs to park")
        # The attack is under way: the worker holds connections to the silent receiver.
        wait_until(lambda: silent.open >= 2, 30, message="POSTs to the silent receiver")

        with httpx.Client(base_url=fair_url, timeout=30) as http:
            def send(message: dict[str, Any]) -> dict[str, Any]:
                sent = rpc(http, "SendMessage", {"message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
                                                             **message},
                                                 "configuration": {"returnImmediately": True}}, token="bob-token")
                assert "result" in sent.json(), sent.text
                return dict(sent.json()["result"]["task"])

            asked = time.monotonic()
            task_id = rpc(http, "SendMessage", {
                "message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [
                    {"data": {"operation": "test.ask_twice", "params": {"ledger": str(tmp_path / "ledger")}}}]},
                "configuration": {"returnImmediately": True, "taskPushNotificationConfig": {"url": healthy.url}}},
                token="bob-token").json()["result"]["task"]["id"]
            wait_until(healthy.bodies, 30, interval=0.01, message="the other owner's first notification")
            first_after = time.monotonic() - asked
            assert first_after < 2.0, f"the other owner's first notification came {first_after:.1f} s after its request"

            # Every update on the way arrives: each question is answered only once its notification came.
            for n, key in enumerate(("first", "second"), start=1):
                wait_until(lambda n=n: healthy.states().count("TASK_STATE_INPUT_REQUIRED") >= n, 30,
                           message=f"the notification of question {n}")
                send({"taskId": task_id, "parts": [{"data": {"inputResponses": {key: {"v": n}}}}]})
        wait_until(lambda: "TASK_STATE_COMPLETED" in healthy.states(), 30, message="the final state")

        # In order, each state of the job's feed (a run of one state is sent as its latest), nothing else.
        feed = fair_runtime.store.redis.xrange(fair_runtime.store.keys.events(task_id))
        owed = _runs([A2A_STATE[fields["s"]] for _, fields in feed])
        assert _runs(healthy.states()) == owed, (healthy.states(), owed)
        assert owed.count("TASK_STATE_INPUT_REQUIRED") == 2 and owed[-1] == "TASK_STATE_COMPLETED"

        # One owner holds at most half the worker's POST slots (8), and a target that never answers is
        # soon left alone instead of being handed a connection per config.
        assert silent.most_open <= 4, silent.most_open
        assert silent.accepted < ATTACK_JOBS * CONFIGS_PER_JOB // 10, silent.accepted
    finally:
        healthy.close()
        silent.close()


# -- the pieces ------------------------------------------------------------------------------------
def test_the_pool_serves_owners_in_turn_and_caps_each() -> None:
    pool = FairPool(workers=2, per_owner=1)
    order: list[str] = []
    release = threading.Event()
    lock = threading.Lock()

    def task(name: str) -> None:
        with lock:
            order.append(name)
        release.wait(10)

    try:
        for n in range(5):
            pool.submit("a", lambda n=n: task(f"a{n}"))
        pool.submit("b", lambda: task("b0"))
        # One thread runs a0; the other may not take a1 (owner a is at its cap) and runs b0 at once.
        wait_until(lambda: len(order) == 2, 10, message="two tasks running")
        assert sorted(order) == ["a0", "b0"]
        assert pool.running("a") == 1 and pool.running("b") == 1
    finally:
        release.set()
        pool.shutdown()
    assert order[2:] == ["a1", "a2", "a3", "a4"]


def test_a_breaker_opens_after_silence_probes_once_and_closes_on_an_answer() -> None:
    now = [0.0]
    breakers = Breakers(threshold=3, base_s=5, max_s=20, clock=lambda: now[0])
    target = target_of("alice", "http://hooks.example/alice")
    for _ in range(3):
        assert breakers.allow(target)
        breakers.record(target, False)
    assert not breakers.allow(target) and not breakers.allow(target_of("alice", "http://HOOKS.example:80/other"))
    assert breakers.allow(target_of("alice", "http://hooks.example:8080/alice"))
    # Another owner's configs at the same host are not refused: each owner opens only its own breakers.
    assert breakers.allow(target_of("bob", "http://hooks.example/bob"))
    now[0] = 5.0
    assert breakers.allow(target)  # the one probe
    assert not breakers.allow(target)  # no second while it runs
    breakers.record(target, False)
    now[0] = 14.0
    assert not breakers.allow(target)  # open twice as long after a failed probe
    now[0] = 15.0
    assert breakers.allow(target)
    breakers.record(target, None)  # the attempt never reached the target: another may probe
    assert breakers.allow(target)
    breakers.record(target, True)
    assert breakers.allow(target) and breakers.allow(target)
