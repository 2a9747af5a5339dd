"""Push delivery under faults: an expired feed, configs that cannot be sent, receivers that dribble,
never answer or answer garbage, cursors saved while their keys vanish. Real Redis, a real worker,
real sockets on loopback."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from adapters.a2a.push import Contexts
from adapters.protocol import push_formats
from tasks_backend.access.auth import Principal
from tasks_backend.config import Settings
from tasks_backend.devtools.receivers import Receiver
from tasks_backend.errors import StoreUnavailable
from tasks_backend.model.domain import JobRecord
from tasks_backend.push.delivery import PushDeliverer
from tasks_backend.push.subscriptions import Cursor, PushStore, post_event
from tasks_backend.service.runtime import Runtime
from tests.conftest import wait_until

ALICE, BOB = Principal("alice"), Principal("bob")


class RawReceiver:
    """A TCP server on loopback that answers each connection with `behaviour`:

    - "silent": never accepts (the kernel completes the handshake; nothing is ever read or written);
    - "dribble": a status line and then headers, one byte every 0.2 s, for up to a minute;
    - "garbage": a line that is not an HTTP status line, then close.
    """

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.stopped = threading.Event()
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        if behaviour != "silent":
            threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                if self.behaviour == "garbage":
                    conn.sendall(b"SURPRISE\r\n\r\n")
                    return
                payload = b"HTTP/1.1 200 OK\r\n" + b"X-Slow: yes\r\n" * 1000
                for byte in payload:
                    if self.stopped.wait(0.2):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                return

    def close(self) -> None:
        self.stopped.set()
        self.sock.close()


@pytest.fixture
def raw_receivers() -> Iterator[list[RawReceiver]]:
    made: list[RawReceiver] = []
    yield made
    for r in made:
        r.close()


def _job(runtime: Runtime, principal: Principal = ALICE, operation: str = "test.noop",
         params: dict[str, Any] | None = None) -> JobRecord:
    record, _ = runtime.service.submit(principal, operation, params or {})
    return record


def _put(runtime: Runtime, record: JobRecord, config: dict[str, Any]) -> None:
    """Store a config as it stands (validation bypassed: as one stored before it was validated)."""
    PushStore(runtime.store).put(record, {"id": record.id, "taskId": record.id, **config}, after="0-0")


def _finished(runtime: Runtime, record: JobRecord) -> None:
    wait_until(lambda: runtime.service.get(ALICE if record.owner == "alice" else BOB, record.id).terminal, 30,
               message="the job to finish")


def _redis_ms(runtime: Runtime) -> int:
    seconds, micros = runtime.store.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _score(runtime: Runtime, job_id: str) -> float | None:
    score: float | None = runtime.store.redis.zscore(runtime.store.keys.push_due(), job_id)
    return score


def _deliver_until(deliverer: PushDeliverer, done: Any, message: str, timeout: float = 30) -> None:
    def step() -> bool:
        deliverer.deliver_once()
        return bool(done())

    wait_until(step, timeout, interval=0.05, message=message)


# -- the final state outlives the feed -------------------------------------------------------------
@pytest.mark.usefixtures("worker")
def test_the_final_state_is_delivered_after_the_feed_expired(runtime: Runtime, settings: Settings) -> None:
    receiver = Receiver(fail_first=10**6)
    deliverer = PushDeliverer(runtime.store, settings.with_(push_allow_private=True), formats=push_formats())
    try:
        record = _job(runtime)
        _put(runtime, record, {"url": receiver.url})
        _finished(runtime, record)
        _deliver_until(deliverer, lambda: receiver.attempts >= 1, "a failed first attempt")
        # The receiver comes back only after the feed is gone (it expires a minute after the end).
        runtime.store.redis.delete(runtime.store.keys.events(record.id))
        with receiver.lock:
            receiver.fail_first = receiver.attempts
        _deliver_until(deliverer, lambda: "TASK_STATE_COMPLETED" in receiver.states(), "the final state")
        assert receiver.states() == ["TASK_STATE_COMPLETED"]  # what came before was given up
        assert receiver.bodies()[0]["artifactUpdate"]["artifact"]["parts"] == [{"data": {"ok": True}}]
        _deliver_until(deliverer, lambda: _score(runtime, record.id) is None, "the job to leave the due set")
    finally:
        receiver.close()
        deliverer.close()


@pytest.mark.usefixtures("worker")
def test_a_dead_receiver_is_given_up_without_polling_in_the_past(runtime: Runtime, settings: Settings) -> None:
    receiver = Receiver(fail_first=10**6)
    deliverer = PushDeliverer(runtime.store, settings.with_(push_allow_private=True, push_max_attempts=3),
                              formats=push_formats())
    try:
        record = _job(runtime)
        _put(runtime, record, {"url": receiver.url})
        _finished(runtime, record)
        _deliver_until(deliverer, lambda: receiver.attempts >= 1, "a failed first attempt")
        runtime.store.redis.delete(runtime.store.keys.events(record.id))
        attempts_before = receiver.attempts

        def step() -> bool:
            started = _redis_ms(runtime)
            deliverer.deliver_once()
            score = _score(runtime, record.id)
            # A job waiting for a retry is due when the retry is, never at a time already past.
            assert score is None or score > started, (score, started)
            return score is None

        wait_until(step, 30, interval=0.05, message="delivery to give up and drop the job")
        assert receiver.attempts > attempts_before  # the final state was tried from the record
    finally:
        receiver.close()
        deliverer.close()


# -- one config's failure is its own ---------------------------------------------------------------
@pytest.mark.usefixtures("worker")
def test_configs_that_cannot_be_sent_fail_alone(runtime: Runtime, settings: Settings,
                                                raw_receivers: list[RawReceiver],
                                                caplog: pytest.LogCaptureFixture) -> None:
    healthy, sink = Receiver(), Receiver()
    garbage = RawReceiver("garbage")
    raw_receivers.append(garbage)
    deliverer = PushDeliverer(runtime.store, settings.with_(push_allow_private=True, push_max_attempts=2),
                              formats=push_formats())
    broken = [
        {"url": sink.url, "token": "snow-\u2603-secret"},  # not Latin-1: cannot be a header value
        {"url": sink.url, "authentication": {"scheme": "Bearer", "credentials": "\u2603-secret"}},
        {"url": sink.url.replace("/hook", "/a hook")},  # a space in the request line: InvalidURL
        {"url": garbage.url},  # BadStatusLine
    ]
    try:
        bad_jobs = [_job(runtime) for _ in broken]
        for record, config in zip(bad_jobs, broken, strict=True):
            _put(runtime, record, config)
        good = _job(runtime, BOB)
        _put(runtime, good, {"url": healthy.url})
        for record in [*bad_jobs, good]:
            _finished(runtime, record)
        with caplog.at_level(logging.INFO, logger="tasks_backend.push.delivery"):
            _deliver_until(deliverer, lambda: "TASK_STATE_COMPLETED" in healthy.states(), "the healthy receiver")
            _deliver_until(deliverer, lambda: all(_score(runtime, r.id) is None for r in bad_jobs),
                           "the broken configs to be given up")
        assert not sink.calls
        assert garbage.connections >= 2  # each attempt was made, then the event was given up on
        # The suite's worker delivers other files' pushes in this process meanwhile: only this test's jobs count.
        ours = [r.id for r in [*bad_jobs, good]]
        pushes = [r for r in caplog.records if r.name == "tasks_backend.push.delivery"
                  and any(job_id in r.getMessage() for job_id in ours)]
        assert pushes and not any(r.exc_info for r in pushes)
        text = "\n".join(r.getMessage() for r in pushes)
        assert "secret" not in text and "hook" not in text
    finally:
        healthy.close()
        sink.close()
        deliverer.close()


# -- a total deadline per POST, and slow receivers beside healthy ones -----------------------------
def test_a_post_ends_within_its_total_deadline(raw_receivers: list[RawReceiver]) -> None:
    dribbler = RawReceiver("dribble")
    raw_receivers.append(dribbler)
    outcome: list[BaseException | int] = []

    def post() -> None:
        try:
            outcome.append(post_event({"url": dribbler.url}, {}, allow_private=True, timeout_s=1.0))
        except BaseException as exc:
            outcome.append(exc)

    started = time.monotonic()
    threading.Thread(target=post, daemon=True).start()
    wait_until(lambda: outcome, 15, message="the POST to end")
    assert isinstance(outcome[0], TimeoutError)
    assert time.monotonic() - started < 10


@pytest.mark.usefixtures("worker")
def test_slow_receivers_do_not_delay_healthy_ones(runtime: Runtime, settings: Settings,
                                                  raw_receivers: list[RawReceiver]) -> None:
    slow = [RawReceiver("silent") for _ in range(5)] + [RawReceiver("dribble"), RawReceiver("garbage")]
    raw_receivers.extend(slow)
    healthy = Receiver()
    # A timeout far longer than the wait below: the healthy receiver must not queue behind the others.
    deliverer = PushDeliverer(runtime.store, settings.with_(push_allow_private=True, push_timeout_s=60),
                              formats=push_formats())
    stop = threading.Event()
    loop = threading.Thread(target=deliverer.run_forever, args=(stop,), daemon=True)
    try:
        for receiver in slow:
            record = _job(runtime)
            _put(runtime, record, {"url": receiver.url})
        good = _job(runtime, BOB, "demo.sleep", {"seconds": 0.6, "steps": 3})
        _put(runtime, good, {"url": healthy.url})
        loop.start()
        wait_until(lambda: "TASK_STATE_COMPLETED" in healthy.states(), 30, message="the healthy receiver")
        states = healthy.states()
        assert states[0] == "TASK_STATE_SUBMITTED" and states[-1] == "TASK_STATE_COMPLETED"
        rank = {"TASK_STATE_SUBMITTED": 0, "TASK_STATE_WORKING": 1, "TASK_STATE_COMPLETED": 2}
        assert "TASK_STATE_WORKING" in states
        assert [rank[s] for s in states] == sorted(rank[s] for s in states)  # never an older state after a newer
    finally:
        stop.set()
        for receiver in slow:  # ends the POSTs still waiting on them
            receiver.close()
        if loop.ident is not None:
            loop.join(30)
        healthy.close()
    assert not loop.is_alive()


# -- saved cursors keep their TTL ------------------------------------------------------------------
@pytest.mark.usefixtures("worker")
def test_no_push_key_is_left_without_a_ttl(runtime: Runtime, settings: Settings) -> None:
    r, keys = runtime.store.redis, runtime.store.keys
    record = _job(runtime)
    vanish = threading.Event()
    # The receiver deletes the cursors hash while the first POST is in flight, as an expiry racing a save would.
    receiver = Receiver()
    original = receiver.server.RequestHandlerClass.do_POST  # type: ignore[attr-defined]

    def do_post(handler: Any) -> None:
        if not vanish.is_set():
            vanish.set()
            r.delete(keys.push_cursors(record.id))
        original(handler)

    receiver.server.RequestHandlerClass.do_POST = do_post  # type: ignore[attr-defined]
    deliverer = PushDeliverer(runtime.store, settings.with_(push_allow_private=True), formats=push_formats())
    try:
        _put(runtime, record, {"url": receiver.url})
        Contexts(runtime.store).set(record, "ctx")
        _finished(runtime, record)
        _deliver_until(deliverer, lambda: "TASK_STATE_COMPLETED" in receiver.states(), "the final state")
        found = [k for k in r.scan_iter(f"{keys.prefix}:{{{record.id}}}:*")] + [keys.push_due()]
        assert keys.push_configs(record.id) in found
        for key in found:
            if r.exists(key):
                assert r.pttl(key) > 0, key
    finally:
        receiver.close()
        deliverer.close()


# -- locks and cursor saves ------------------------------------------------------------------------
def test_a_pass_that_lost_its_lock_saves_nothing_and_leaves_the_new_lock(runtime: Runtime) -> None:
    r, push = runtime.store.redis, PushStore(runtime.store)
    record = _job(runtime)
    _put(runtime, record, {"url": "https://8.8.8.8/h"})
    lock = runtime.store.keys.push_lock(record.id)
    mine = push.try_claim(record.id, 5000)
    assert mine is not None
    pending = push.read(record.id, 0)
    r.delete(lock)  # the lock lapsed (a pass far over its budget) and another worker took the job
    theirs = push.try_claim(record.id, 5000)
    assert theirs is not None
    push.finish(pending, mine, {record.id: Cursor(after="9-9")}, None)
    assert push.cursors(record.id)[record.id].after == "0-0"
    push.release(record.id, mine)
    assert r.get(lock) == theirs
    push.release(record.id, theirs)
    assert not r.exists(lock)


def test_a_config_replaced_or_deleted_during_a_pass_is_left_alone(runtime: Runtime) -> None:
    r, push = runtime.store.redis, PushStore(runtime.store)
    replaced, deleted = _job(runtime), _job(runtime)
    for record in (replaced, deleted):
        _put(runtime, record, {"url": "https://8.8.8.8/h"})
    passes = {}
    for record in (replaced, deleted):
        token = push.try_claim(record.id, 5000)
        assert token is not None
        passes[record.id] = (push.read(record.id, 0), token)
    push.put(replaced, {"id": replaced.id, "taskId": replaced.id, "url": "https://1.1.1.1/h"}, after="5-5")
    push.delete(deleted.id, deleted.id)
    for record in (replaced, deleted):
        pending, token = passes[record.id]
        push.finish(pending, token, {record.id: Cursor(after="9-9", tag=pending.cursor(record.id).tag)}, None)
    assert push.cursors(replaced.id)[replaced.id].after == "5-5"  # the replacement starts where it was put
    assert _score(runtime, replaced.id) == 0  # and is due at once
    assert not r.exists(runtime.store.keys.push_cursors(deleted.id))


@pytest.mark.usefixtures("worker")
def test_a_config_put_on_a_finished_job_has_nothing_ahead(runtime: Runtime) -> None:
    record = _job(runtime)
    _finished(runtime, record)
    finished = runtime.service.get(ALICE, record.id)
    push = PushStore(runtime.store)
    # Created after the end, from where the feed stands (as CreateTaskPushNotificationConfig does).
    push.put(finished, {"id": "late", "taskId": record.id, "url": "https://8.8.8.8/h"},
             after=push.last_event_id(record.id))
    assert push.cursors(record.id)["late"].done
    # Once the feed has expired there is nothing left to send, wherever the subscription starts.
    runtime.store.redis.delete(runtime.store.keys.events(record.id))
    push.put(finished, {"id": "later", "taskId": record.id, "url": "https://8.8.8.8/h"}, after="0-0")
    assert push.cursors(record.id)["later"].done


@pytest.mark.usefixtures("worker")
def test_a_subscription_stored_again_after_its_job_finished_still_gets_the_final_state(
        runtime: Runtime, settings: Settings) -> None:
    # A SendMessage whose first try submitted the job but never stored its subscription (the web
    # process died, or Redis stopped answering, in between) is retried with the same idempotency
    # key: the retry finds the job finished and stores the subscription from the start of the feed.
    receiver = Receiver()
    deliverer = PushDeliverer(runtime.store, settings.with_(push_allow_private=True), formats=push_formats())
    try:
        record = _job(runtime)
        _finished(runtime, record)
        finished = runtime.service.get(ALICE, record.id)
        PushStore(runtime.store).put(finished, {"id": record.id, "taskId": record.id, "url": receiver.url},
                                     after="0-0")
        _deliver_until(deliverer, lambda: "TASK_STATE_COMPLETED" in receiver.states(), "the final state", 10)
        _deliver_until(deliverer, lambda: _score(runtime, record.id) is None, "the job to leave the due set", 10)
    finally:
        receiver.close()
        deliverer.close()


def test_a_save_that_fails_leaves_the_job_due(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    push = PushStore(runtime.store)
    record = _job(runtime)
    _put(runtime, record, {"url": "https://8.8.8.8/h"})
    now = _redis_ms(runtime)
    assert push.claim_many([record.id], "mine", 5000, now) == [record.id]
    pending = push.read(record.id, now)
    # While the pass runs, another subscription is stored (and made due at once) ...
    push.put(record, {"id": "added", "taskId": record.id, "url": "https://8.8.8.8/h"}, after="0-0")
    delivered = {record.id: Cursor(after="9-9", done=True, tag=pending.cursor(record.id).tag)}

    send = push.scripts.call

    def unreachable(name: str, *args: Any) -> Any:
        if name == "push.finish":
            raise redis.exceptions.ConnectionError("cut")
        return send(name, *args)

    # ... and the pass, done with what it read, cannot save: Redis stopped answering.
    with monkeypatch.context() as patched:
        patched.setattr(push.scripts, "call", unreachable)
        with pytest.raises(StoreUnavailable):
            push.finish(pending, "mine", delivered, None)
    assert _score(runtime, record.id) is not None  # looked at again, the added subscription with it
    push.finish(pending, "mine", delivered, None)  # the same save, answered this time
    assert _score(runtime, record.id) == 0
    assert not push.cursors(record.id)["added"].done


@pytest.mark.usefixtures("worker")
def test_a_save_that_meets_a_brief_outage_is_made_within_the_pass(runtime: Runtime, settings: Settings,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis does not answer the pass's save twice (a restart, a stall), then does: the pass saves then, instead of
    leaving its lock to lapse a minute later and posting the same events again."""
    receiver = Receiver()
    deliverer = PushDeliverer(runtime.store, settings.with_(push_allow_private=True), formats=push_formats())
    try:
        record = _job(runtime)
        _put(runtime, record, {"url": receiver.url})
        _finished(runtime, record)
        cuts, send = [2], deliverer.push.scripts.call

        def cut_twice(name: str, *args: Any) -> Any:
            if name == "push.finish" and cuts[0]:
                cuts[0] -= 1
                raise redis.exceptions.ConnectionError("cut")
            return send(name, *args)

        monkeypatch.setattr(deliverer.push.scripts, "call", cut_twice)
        _deliver_until(deliverer, lambda: _score(runtime, record.id) is None, "the pass to be saved", timeout=20)
        assert cuts == [0] and receiver.states().count("TASK_STATE_COMPLETED") == 1
    finally:
        receiver.close()
        deliverer.close()


def test_a_replayed_claim_keeps_the_lock_for_its_caller(runtime: Runtime) -> None:
    push, job_id = PushStore(runtime.store), f"job-{time.monotonic_ns()}"
    runtime.store.redis.script_flush()  # as after a Redis restart: the scripts are loaded again
    assert push.claim_many([job_id], "mine", 5000, 0) == [job_id]
    assert push.claim_many([job_id], "mine", 5000, 0) == [job_id]  # the same command again (a lost reply)
    assert push.claim_many([job_id], "theirs", 5000, 0) == []
    push.release(job_id, "mine")
    assert push.claim_many([job_id], "theirs", 5000, 0) == [job_id]
    push.release(job_id, "theirs")


# -- one clock: Redis's ------------------------------------------------------------------------------
# Where Debian's libfaketime package puts it, unless LIBFAKETIME names another file.
FAKETIME = Path(os.environ.get("LIBFAKETIME") or
                Path("/usr/lib", sysconfig.get_config_var("MULTIARCH") or "", "faketime", "libfaketimeMT.so.1"))

# (`select` rather than `time.sleep`: libfaketime breaks the absolute-time sleep Python uses.)
_SKEWED_PASSES = """
import select, sys, time
from tasks_backend.config import Settings
from tasks_backend.store.keys import Keys
from tasks_backend.store.connect import connect
from tasks_backend.store.jobs import RedisStore
from adapters.protocol import push_formats
from tasks_backend.push.delivery import PushDeliverer
settings = Settings(redis_url=sys.argv[1], key_prefix=sys.argv[2], push_allow_private=True)
store = RedisStore(connect(settings.redis_url), Keys(settings.key_prefix), max_ttl_ms=86_400_000)
deliverer = PushDeliverer(store, settings, formats=push_formats())
print(int(time.time() * 1000), flush=True)
ends = time.monotonic() + float(sys.argv[3])
while time.monotonic() < ends:
    deliverer.deliver_once()
    select.select([], [], [], 0.05)
deliverer.close()
"""


def _skewed_passes(settings: Settings, skew: str, seconds: float) -> int:
    """Run delivery passes for `seconds` in a process whose clock is off by `skew`; returns its time."""
    env = {**os.environ, "LD_PRELOAD": str(FAKETIME), "FAKETIME": skew, "FAKETIME_DONT_FAKE_MONOTONIC": "1",
           "FAKETIME_NO_CACHE": "1"}
    done = subprocess.run([sys.executable, "-c", _SKEWED_PASSES, settings.redis_url, settings.key_prefix,
                           str(seconds)], env=env, cwd=Path(__file__).resolve().parents[3], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[0])


@pytest.mark.skipif(not FAKETIME.exists(), reason="libfaketime is not installed")
@pytest.mark.usefixtures("worker")
def test_delivery_times_come_from_redis_not_the_host_clock(runtime: Runtime, settings: Settings) -> None:
    receiver = Receiver()
    try:
        waiting, fresh = _job(runtime), _job(runtime)
        for record in (waiting, fresh):
            _finished(runtime, record)
        # A config waiting a minute for its retry, by Redis's clock.
        _put(runtime, waiting, {"url": receiver.url})
        retry_at = _redis_ms(runtime) + 60_000
        cursor = PushStore(runtime.store).cursors(waiting.id)[waiting.id]
        runtime.store.redis.hset(runtime.store.keys.push_cursors(waiting.id), waiting.id,
                                 dataclasses.replace(cursor, attempts=1, retry_at_ms=retry_at).to_json())
        runtime.store.redis.zadd(runtime.store.keys.push_due(), {waiting.id: retry_at})
        # A worker whose clock runs two minutes ahead does not retry early.
        ahead = _skewed_passes(settings, "+120s", 1.5)
        assert ahead - _redis_ms(runtime) > 100_000  # the skew took effect
        assert receiver.attempts == 0 and _score(runtime, waiting.id) == retry_at
        # A worker whose clock runs two minutes behind still delivers what is due now.
        _put(runtime, fresh, {"url": receiver.url})
        behind = _skewed_passes(settings, "-120s", 3)
        assert _redis_ms(runtime) - behind > 100_000
        assert "TASK_STATE_COMPLETED" in receiver.states()
        assert {b["statusUpdate"]["taskId"] for b in receiver.bodies() if "statusUpdate" in b} == {fresh.id}
    finally:
        receiver.close()
