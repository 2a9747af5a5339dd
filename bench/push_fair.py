"""A hostile owner's push configs against another owner's notifications, on the processes as shipped.

Usage: python -m bench.push_fair [--jobs 500] [--configs 10] [--victims 5] [--seconds 60] [--wait 60]

Starts Redis, `tasks-backend web` and `tasks-backend worker` (push delivery as in production: default timeout and
concurrency; private targets allowed, the receivers are on loopback), a receiver that accepts connections and never
answers, and a healthy one. One owner parks `--jobs` jobs (`demo.refund`, waiting for an approval) with `--configs`
push configs each pointing at the silent receiver, all over A2A. Then another owner sends jobs one after the other
(`--victims` idle; under the attack at least that many, and more for `--seconds`), each with one config to the
healthy receiver, and answers each question once its notification arrived. The run prints, idle and under the
attack: the other owner's first-notification latency (from the request to the first POST), whether every state it
was owed arrived in order (each run of one state of the job's feed, nothing else), and how many connections the
silent receiver was given at once and in all.
"""

from __future__ import annotations

import argparse
import itertools
import os
import secrets
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import redis

from tasks_backend.devtools.embedded import EmbeddedRedis, free_port
from tasks_backend.devtools.receivers import NeverAnswers, Receiver
from tasks_backend.store.keys import Keys

from . import procs

ROOT = procs.ROOT
PREFIX = "pushfair"
A2A_STATE = {"queued": "TASK_STATE_SUBMITTED", "running": "TASK_STATE_WORKING",
             "input_required": "TASK_STATE_INPUT_REQUIRED", "completed": "TASK_STATE_COMPLETED",
             "failed": "TASK_STATE_FAILED", "cancelled": "TASK_STATE_CANCELED"}


def states(receiver: Receiver, task_id: str) -> list[tuple[float, str]]:
    """(arrival, A2A state) of each status update the receiver got for the task."""
    with receiver.lock:
        return [(t, b["statusUpdate"]["status"]["state"]) for t, b in receiver.arrivals
                if b.get("statusUpdate", {}).get("taskId") == task_id]


def _runs(states: list[str]) -> list[str]:
    return [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]


def _wait(predicate: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout_s:g} s")
        time.sleep(0.01)
    return value


class A2A:
    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=60,
                                 headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"})

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = self.http.post("/a2a", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).json()
        if "result" not in body:
            raise RuntimeError(f"{method}: {body}")
        return dict(body["result"])

    def send(self, parts: list[dict[str, Any]], task_id: str = "", push_url: str = "") -> str:
        message: dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": parts}
        if task_id:
            message["taskId"] = task_id
        configuration: dict[str, Any] = {"returnImmediately": True}
        if push_url:
            configuration["taskPushNotificationConfig"] = {"url": push_url}
        return str(self.call("SendMessage", {"message": message, "configuration": configuration})["task"]["id"])

    def order(self, n: int, push_url: str) -> str:
        return self.send([{"data": {"operation": "demo.refund", "params": {"order_id": f"o{n}", "amount": 1}}}],
                         push_url=push_url)


def victim_runs(victim: A2A, healthy: Receiver, store: redis.Redis, keys: Keys, count: int,
                wait_s: float, for_s: float = 0) -> list[dict[str, Any]]:
    """At least `count` jobs one after the other, and more until `for_s` seconds have passed: first-notification
    latency and whether every owed state came in order (a notification that does not come within `wait_s` is
    reported as missing, and the job left where it is)."""
    out: list[dict[str, Any]] = []
    until = time.monotonic() + for_s
    for n in itertools.count():
        if n >= count and time.monotonic() >= until:
            break
        asked = time.monotonic()
        task_id = victim.order(n, healthy.url)
        run: dict[str, Any] = {"first_s": None, "missing": ""}
        try:
            first = _wait(lambda task_id=task_id: states(healthy, task_id), wait_s, "first notification")[0][0]
            run["first_s"] = first - asked
            _wait(lambda task_id=task_id: any(s == "TASK_STATE_INPUT_REQUIRED" for _, s in states(healthy, task_id)),
                  wait_s, "input-required notification")
            victim.send([{"data": {"inputResponses": {"approval": {"approved": True}}}}], task_id=task_id)
            _wait(lambda task_id=task_id: any(s == "TASK_STATE_COMPLETED" for _, s in states(healthy, task_id)),
                  wait_s, "final notification")
        except TimeoutError as exc:
            run["missing"] = str(exc)
        got = [s for _, s in states(healthy, task_id)]
        feed: Any = store.xrange(keys.events(task_id))
        owed = _runs([A2A_STATE[f["s"]] for _, f in feed])
        out.append({**run, "in_order": not run["missing"] and _runs(got) == owed, "owed": owed, "got": got})
    return out


def report(label: str, runs: list[dict[str, Any]]) -> None:
    firsts = sorted(r["first_s"] for r in runs if r["first_s"] is not None)
    late = len(runs) - len(firsts)
    timing = (f"median {firsts[len(firsts) // 2]:.2f} s, max {firsts[-1]:.2f} s" if firsts else "none") + (
        f", {late} never came" if late else "")
    ordered = sum(bool(r["in_order"]) for r in runs)
    print(f"| {label} | first notification: {timing} | every owed state, in order: {ordered}/{len(runs)} jobs "
          f"({sum(len(r['owed']) for r in runs)} states owed, {sum(len(r['got']) for r in runs)} POSTs) |")
    for r in runs:
        if not r["in_order"]:
            print(f"|   owed {r['owed']} | got {r['got']} | {r['missing']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--configs", type=int, default=10)
    parser.add_argument("--victims", type=int, default=5)
    parser.add_argument("--wait", type=float, default=60, help="seconds to wait for each notification")
    parser.add_argument("--seconds", type=float, default=60, help="keep sending jobs under the attack this long")
    args = parser.parse_args()

    logs = Path(tempfile.mkdtemp(prefix="bench-push-fair-"))
    server = EmbeddedRedis(appendonly=False).start()
    port = free_port()
    attacker_token, victim_token = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": server.url, "TASKS_BACKEND_KEY_PREFIX": PREFIX,
           "TASKS_BACKEND_TOKENS": f"mallory:{attacker_token},bob:{victim_token}",
           "TASKS_BACKEND_JOBS": "tasks_backend.demo", "TASKS_BACKEND_PUSH_ALLOW_PRIVATE": "1",
           # Setting the attack up quickly is not what is measured; spread out, it would pass the limit anyway.
           "TASKS_BACKEND_RATE_LIMIT": "0"}
    web = procs.start("web", [sys.executable, "-m", "tasks_backend.cli", "web", "--workers", "2", "--bind",
                              f"127.0.0.1:{port}"],
                      env, logs)
    worker = procs.start("worker", [sys.executable, "-m", "tasks_backend.cli", "worker", "--pool", "threads",
                                    "--concurrency", "4"],
                         env, logs)
    silent, healthy = NeverAnswers(), Receiver(path="/hook")
    store = redis.Redis.from_url(server.url, decode_responses=True)
    keys = Keys(PREFIX)
    try:
        url = f"http://127.0.0.1:{port}"
        procs.wait_http(web, f"{url}/healthz")
        attacker, victim = A2A(url, attacker_token), A2A(url, victim_token)
        report("idle", victim_runs(victim, healthy, store, keys, args.victims, args.wait))

        started = time.monotonic()
        parked = []
        for n in range(args.jobs):
            task_id = attacker.order(n, f"{silent.url}/0")
            for c in range(1, args.configs):
                attacker.call("CreateTaskPushNotificationConfig",
                              {"taskId": task_id, "id": f"c{c}", "url": f"{silent.url}/{c}"})
            parked.append(task_id)
        _wait(lambda: all(store.hget(keys.job(t), "state") == "input_required" for t in parked), 300, "parked jobs")
        _wait(lambda: silent.accepted, 60, "POST to the silent receiver")
        print(f"attack: {args.jobs} parked jobs x {args.configs} configs to a receiver that never answers, "
              f"set up in {time.monotonic() - started:.0f} s; due jobs: {store.zcard(keys.push_due())}")
        report(f"{args.jobs} x {args.configs} configs never answered", victim_runs(victim, healthy, store, keys,
                                                                                   args.victims, args.wait,
                                                                                   args.seconds))
        print(f"silent receiver: at most {silent.most_open} connections open at once, {silent.accepted} in all "
              f"over {time.monotonic() - started:.0f} s")
    finally:
        worker.stop()
        web.stop()
        server.stop()
    print(f"logs: {logs}")


if __name__ == "__main__":
    main()
