"""Drives the job mix over the HTTP and A2A APIs, as clients would, and watches every job to its end.

Every submit carries an Idempotency-Key, so a client may retry it after a 503, a timeout or a dropped
connection without making a second job: "accepted" means the client got a handle back.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from tasks_backend.errors import StoreUnavailable
from tasks_backend.store.jobs import RedisStore

from .services import Receiver

TERMINAL = {"completed", "failed", "cancelled"}
#: The mix: kind -> weight.
MIX = {"steps": 34, "ask": 12, "cancel_queued": 8, "cancel_running": 8, "fail": 8, "dup": 10, "push": 20,
       "delayed": 3, "nap": 3, "parent": 3, "lane": 4}
RETRY_S = 30.0  # how long a client keeps retrying one call through 503s and dropped connections
INTERNAL_ERROR = -32603  # JSON-RPC's answer while the store is unreachable (HTTP says 503)


@dataclass
class Tracked:
    kind: str
    key: str
    token: str
    expected: frozenset[str]
    id: str | None = None
    started: float = field(default_factory=time.monotonic)  # when the client began (before any retry)
    submitted: float = 0.0  # when it got the handle
    final: str | None = None
    final_at: float = 0.0
    error_type: str | None = None
    push_extra: str | None = None
    cancel_conflict: bool = False  # the cancel was answered 409 ("already terminal")
    #: The recorded effects (step names) a completed job must have applied downstream.
    effects: tuple[str, ...] = ()
    delay_s: float = 0.0  # a delayed job's delay: its first effect may not arrive before `started` + this
    sleep_s: float = 0.0  # a sleeping job's parked sleep, between its effects s0 and s1
    parked: bool = False  # seen `suspended` in Redis while it slept
    parent_id: str | None = None  # a child job: its parent
    spawn: tuple[int, int] = (0, 0)  # a parent: how many children it spawns, with how many steps each
    notes: list[str] = field(default_factory=list)


@dataclass
class Answer:
    at: float
    status: int
    path: str


class Api:
    """One HTTP client for every call the soak makes; it records every 5xx answer and retries as a client would."""

    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=10.0,
                                 limits=httpx.Limits(max_connections=64, max_keepalive_connections=32))
        self.lock = threading.Lock()
        self.server_errors: list[Answer] = []   # 5xx other than 503 with Retry-After
        self.unavailable = 0                    # 503 with Retry-After: the documented answer while Redis is away
        self.throttled = 0
        self.transport_errors = 0

    def call(self, method: str, path: str, token: str, *, json: Any = None, headers: dict[str, str] | None = None,
             retry_s: float = RETRY_S) -> httpx.Response | None:
        deadline = time.monotonic() + retry_s
        delay = 0.1
        attempts = 0
        while True:
            response = None
            attempts += 1
            try:
                response = self.http.request(method, path, json=json,
                                             headers={"Authorization": f"Bearer {token}", **(headers or {})})
            except httpx.TransportError:
                with self.lock:
                    self.transport_errors += 1
            if response is not None:
                status = response.status_code
                if status == 503 and response.headers.get("Retry-After"):
                    with self.lock:
                        self.unavailable += 1
                elif status == 429:
                    with self.lock:
                        self.throttled += 1
                elif status >= 500:
                    with self.lock:
                        self.server_errors.append(Answer(time.monotonic(), status, f"{method} {path}"))
                else:
                    # How many tries this answer took: after a 503 or a cut connection the caller cannot know
                    # whether an earlier try took effect (a retried cancel may find its own cancellation).
                    response.extensions["soak_attempts"] = attempts
                    return response
            if time.monotonic() + delay > deadline:
                return response
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def close(self) -> None:
        self.http.close()


class Driver:
    def __init__(self, api: Api, tokens: list[str], seed: int, *, healthy: Receiver, others: dict[str, str]) -> None:
        self.api, self.tokens = api, tokens
        self.rng = random.Random(f"jobs:{seed}")
        self.healthy, self.others = healthy, others
        self.jobs: list[Tracked] = []
        self.duplicate_jobs: list[tuple[Tracked, set[str]]] = []
        self.client_errors: list[str] = []
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="soak-client")
        self.stop = threading.Event()

    # -- submitting --------------------------------------------------------------------------
    def _submit(self, job: Tracked, operation: str, params: dict[str, Any],
                extra: dict[str, Any] | None = None) -> str | None:
        response = self.api.call("POST", "/v1/jobs", job.token,
                                 json={"operation": operation, "params": params, **(extra or {})},
                                 headers={"Idempotency-Key": job.key})
        if response is None or response.status_code != 202:
            answer = "no answer" if response is None else f"{response.status_code} {response.text[:200]}"
            job.notes.append(f"submit not accepted within {RETRY_S:.0f}s: {answer}")
            return None
        return str(response.json()["taskId"])

    def _accept(self, job: Tracked, job_id: str | None) -> None:
        if job_id is None:
            return
        with self.lock:
            job.id = job_id
            job.submitted = time.monotonic()

    def _a2a(self, token: str, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """One JSON-RPC call; an internal error (the store unreachable) is retried like a 503."""
        deadline = time.monotonic() + RETRY_S
        while True:
            body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
            response = self.api.call("POST", "/a2a", token, json=body, headers={"A2A-Version": "1.0"})
            if response is None or response.status_code != 200:
                return None
            reply: dict[str, Any] = response.json()
            if (reply.get("error") or {}).get("code") != INTERNAL_ERROR or time.monotonic() > deadline:
                return reply
            with self.api.lock:
                self.api.unavailable += 1
            time.sleep(0.5)

    def run_one(self, kind: str, params_rng: random.Random) -> None:
        try:
            self._run_one(kind, params_rng)
        except Exception as exc:  # an answer the client did not expect: reported with the job, not a crash
            with self.lock:
                self.client_errors.append(f"{kind}: {exc!r}")

    def _run_one(self, kind: str, params_rng: random.Random) -> None:
        token = self.tokens[params_rng.randrange(len(self.tokens))]
        expected = {"fail": {"failed"}, "cancel_queued": {"cancelled"}, "cancel_running": {"cancelled"}}
        job = Tracked(kind, str(uuid.uuid4()), token, frozenset(expected.get(kind, {"completed"})))
        with self.lock:
            self.jobs.append(job)
        steps = {"steps": params_rng.randint(2, 4), "pause": round(params_rng.uniform(0.02, 0.15), 3)}
        if kind in ("steps", "dup", "push", "delayed", "lane"):
            job.effects = tuple(f"s{i}" for i in range(1 if kind == "dup" else int(steps["steps"])))
        if kind == "steps":
            self._accept(job, self._submit(job, "soak.steps", steps))
        elif kind == "delayed":
            job.delay_s = params_rng.randint(2000, 5000) / 1000
            self._accept(job, self._submit(job, "soak.steps", steps, {"delayMs": int(job.delay_s * 1000)}))
        elif kind == "lane":  # three lanes, one job of each at a time: most wait on a full value in the gate
            self._accept(job, self._submit(job, "soak.lane", {**steps, "lane": f"l{params_rng.randrange(3)}"}))
        elif kind == "nap":
            job.sleep_s, job.effects = round(params_rng.uniform(5, 8), 2), ("s0", "s1")
            self._accept(job, self._submit(job, "soak.nap", {"seconds": job.sleep_s}))
        elif kind == "parent":
            job.effects, job.spawn = ("after",), (params_rng.randint(2, 3), params_rng.randint(1, 2))
            self._accept(job, self._submit(job, "soak.parent", {"children": job.spawn[0], "steps": job.spawn[1]}))
        elif kind == "ask":
            job.effects = ("after",)  # the bot always approves
            self._accept(job, self._submit(job, "soak.ask", {}))
        elif kind == "fail":
            self._accept(job, self._submit(job, "soak.fail", {}))
        elif kind == "cancel_queued":
            self._accept(job, self._submit(job, "soak.sleep", {"seconds": 3}))
            self._cancel(job)
        elif kind == "cancel_running":
            self._accept(job, self._submit(job, "soak.sleep", {"seconds": 4}))
            self._cancel_when_running(job)
        elif kind == "dup":
            self._racing_duplicates(job, steps)
        elif kind == "push":
            self._push(job, steps, params_rng)

    def _cancel(self, job: Tracked) -> None:
        if job.id is None:
            return
        response = self.api.call("POST", f"/v1/jobs/{job.id}/cancel", job.token)
        if response is None or response.status_code not in (200, 202, 409):
            job.notes.append(f"cancel answered {None if response is None else response.status_code}")
        if response is not None and response.status_code == 409:
            # Only a first try's 409 is wrong for a job that ends cancelled; a retry may meet its own cancel.
            job.cancel_conflict = response.extensions.get("soak_attempts", 1) == 1
            job.expected = job.expected | {"completed"}  # it may have finished first; never a failure

    def _cancel_when_running(self, job: Tracked) -> None:
        deadline = time.monotonic() + 20
        while job.id is not None and time.monotonic() < deadline:
            response = self.api.call("GET", f"/v1/jobs/{job.id}", job.token, retry_s=5)
            if response is not None and response.status_code == 200:
                body = response.json()
                if "progress" in body or body["status"] in TERMINAL:
                    break
            time.sleep(0.2)
        self._cancel(job)

    def _racing_duplicates(self, job: Tracked, steps: dict[str, Any]) -> None:
        ids: list[str | None] = [None] * 3
        start = threading.Barrier(3)

        def one(i: int) -> None:
            start.wait()
            ids[i] = self._submit(job, "soak.steps", {**steps, "steps": 1})

        threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        got = {i for i in ids if i}
        if len(got) > 1:
            with self.lock:
                self.duplicate_jobs.append((job, got))
        self._accept(job, next(iter(sorted(got)), None))

    def _push(self, job: Tracked, steps: dict[str, Any], params_rng: random.Random) -> None:
        message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
                   "parts": [{"data": {"operation": "soak.steps", "params": steps}}],
                   "metadata": {"idempotencyKey": job.key}}
        config = {"url": self.healthy.url, "token": "soak"}
        reply = self._a2a(job.token, "SendMessage", {"message": message, "configuration": {
            "returnImmediately": True, "taskPushNotificationConfig": config}})
        if not reply or "result" not in reply:
            job.notes.append(f"SendMessage failed: {reply}")
            return
        self._accept(job, str(reply["result"]["task"]["id"]))
        if not self.others:
            return
        extra = params_rng.choice(sorted(self.others))
        job.push_extra = extra
        created = self._a2a(job.token, "CreateTaskPushNotificationConfig",
                            {"taskId": job.id, "id": extra, "url": self.others[extra]})
        if not created or "result" not in created:
            job.notes.append(f"{extra} config not created: {created}")

    # -- the bot that answers input requests -------------------------------------------------
    def bot(self, store: RedisStore) -> None:
        while not self.stop.wait(0.3):
            with self.lock:
                waiting = [j for j in self.jobs if j.kind == "ask" and j.id and j.final is None]
            if not waiting:
                continue
            try:
                records = store.get_many([j.id for j in waiting if j.id])
            except StoreUnavailable:
                continue
            for job, record in zip(waiting, records, strict=True):
                if record is not None and record.state.value == "input_required":
                    self.api.call("POST", f"/v1/jobs/{job.id}/input", job.token,
                                  json={"inputResponses": {"approval": {"approved": True}}}, retry_s=10)

    # -- watching ------------------------------------------------------------------------------
    def watch(self, store: RedisStore) -> None:
        """Note when each job ends (read straight from Redis, to spare the web processes)."""
        while not self.stop.wait(0.5):
            self.observe(store)

    def observe(self, store: RedisStore) -> int:
        with self.lock:
            open_jobs = [j for j in self.jobs if j.id and j.final is None]
        try:
            records = store.get_many([j.id for j in open_jobs if j.id])
        except StoreUnavailable:
            return len(open_jobs)
        now = time.monotonic()
        left = 0
        for job, record in zip(open_jobs, records, strict=True):
            if record is not None and record.state.value == "suspended" and job.kind == "nap":
                job.parked = True
            if record is not None and record.state.value in TERMINAL:
                job.final, job.final_at = record.state.value, now
                job.error_type = (record.error or {}).get("type") if record.error else None
            else:
                left += 1
        return left

    def drive(self, count: int, seconds: float) -> None:
        """Start `count` jobs evenly over `seconds`."""
        kinds, weights = zip(*MIX.items(), strict=True)
        t0 = time.monotonic()
        futures = []
        for i in range(count):
            wait = t0 + i * seconds / count - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            kind = self.rng.choices(kinds, weights)[0]
            futures.append(self.pool.submit(self.run_one, kind, random.Random(self.rng.random())))
        for f in futures:
            f.result()
