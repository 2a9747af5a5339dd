"""What the dispatch gate costs Redis per drained job, by Redis's own clock, with no worker beside it.

Usage: python -m bench.gate_drain [--jobs 3000] [--rounds 4] [--slots 2] [--redis-server PATH]

One owner's jobs are held (more than the slots; made held as delayed jobs that came due, since a lone owner's new
jobs would skip the gate), then drained as a worker would: each round pops the next message from the broker's list
and ends a run, whose leave lets the next held job in (`gate/leave.lua`, the gate's part of a run's last
transition). Then the same owner's jobs as a lone owner's submit makes them: past the slots, sent to the bypass list
(`Keys.bypass_queue`), whose runs' ends only drop their entries. Alternated with them, the baseline: a script that
does nothing, called with the same keys and arguments (what any script call costs). Printed per round and as
medians: Redis's time in scripts and its CPU per job, and their ratio to the baseline. The runner row of `bench.run
--only dispatch` measures the same work inside a real drain, where two shared cores make each step cost two to three
times as much and the machine's drift moves the ratio by more than the gate costs; this is the figure a change to
the gate's scripts is judged by.
"""

from __future__ import annotations

import argparse
import uuid
from dataclasses import dataclass
from typing import Any

import redis

from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import EmbeddedRedis
from tasks_backend.service.runtime import Runtime, build_runtime
from tasks_backend.store.admission import entry as gate_entry

from .measures import paired_medians
from .procs import script_usec


@dataclass(frozen=True)
class Drained:
    """Per job: Redis's time in scripts (us, its clock) and its CPU (us), read as differences (other clients of the
    same server count too); and the jobs as their messages were popped, each checked to be the one due next."""

    script_us: float
    cpu_us: float
    popped: list[str]


def redis_cpu_s(client: Any) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def drain(runtime: Runtime, jobs: int, *, lone: bool = False) -> Drained:
    """`jobs` jobs of one owner, held (`lone`: as a lone owner's submit sends them, mostly past the gate), then
    drained one run's end at a time, the queue's own list read first as a worker does; measured over the drain
    only."""
    gate, store = runtime.service.admission, runtime.store
    call = gate.call()
    assert call.push is not None, "the broker must be the store's Redis: the gate pushes in its scripts"
    queue, bypass, client = call.push[0], call.push[3], store.redis
    client.delete(queue, bypass)
    owner = store.keys.gate_owner(f"drain-{uuid.uuid4().hex[:8]}")
    ids = sorted(str(uuid.uuid4()) for _ in range(jobs))  # delayed jobs due in one ms are held in id order
    for job_id in ids:
        store.gate_admit(call, job_id, gate_entry(owner, 5, gate.message(job_id, "bench.noop")), "0" if lone else "1")
    while not lone and client.zcard(call.key("delayed")):
        store.gate_tick(call)  # due: held in submission order (the first `slots` sent)
    popped: list[str] = []
    scripts_before, cpu_before = script_usec(client), redis_cpu_s(client)
    for done in ids:
        message = client.rpop(queue) or client.rpop(bypass)  # the worker's fetch
        if message is None or done not in str(message):
            raise RuntimeError(f"the gate sent {message!r:.80} where job {done} was next")
        popped.append(done)
        store.gate_leave(call, [done], final=True)
    return Drained((script_usec(client) - scripts_before) / jobs, (redis_cpu_s(client) - cpu_before) * 1e6 / jobs,
                   popped)


def empty_calls(runtime: Runtime, jobs: int) -> Drained:
    """The baseline: the same number of script calls, with the leave's keys and arguments, doing nothing."""
    client, call = runtime.store.redis, runtime.service.admission.call()
    sha = client.script_load("return 1")
    keys = call.all_keys()
    scripts_before, cpu_before = script_usec(client), redis_cpu_s(client)
    for _ in range(jobs):
        client.rpop(call.push[0] if call.push else "none")
        client.evalsha(sha, len(keys), *keys, *call.head(), "1", str(uuid.uuid4()))
    return Drained((script_usec(client) - scripts_before) / jobs, (redis_cpu_s(client) - cpu_before) * 1e6 / jobs,
                   [])


def runtime_on(url: str, slots: int, *, fair: bool = True, **overrides: Any) -> Runtime:
    """A runtime whose broker is its store's Redis at `url`, running the bench's jobs with its limits out of the way
    (`overrides`: `Settings` fields, such as its own key prefix and queue)."""
    return build_runtime(Settings.from_env({
        "REDIS_URL": url, "TASKS_BACKEND_JOBS": "bench.jobs", "TASKS_BACKEND_DISPATCH_SLOTS": str(slots),
        "TASKS_BACKEND_FAIR_SHARES": "1" if fair else "0", "TASKS_BACKEND_RATE_LIMIT": "1000000000",
        "TASKS_BACKEND_MAX_ACTIVE_JOBS": "1000000000"}, **overrides))


def own_redis_args(description: str, jobs: int, rounds: int, argv: list[str] | None) -> argparse.Namespace:
    """The options of a bench run against a Redis of its own: jobs a round, rounds, worker slots, which redis-server."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--jobs", type=int, default=jobs)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--redis-server", default=None, help="a redis-server binary (default: the embedded one)")
    return parser.parse_args(argv)


def own_redis(args: argparse.Namespace) -> EmbeddedRedis:
    """That Redis, started (the embedded one unless `--redis-server` names another)."""
    return EmbeddedRedis(**({"binary": args.redis_server} if args.redis_server else {})).start()


def main(argv: list[str] | None = None) -> int:
    args = own_redis_args(__doc__.splitlines()[0], 3000, 4, argv)
    server = own_redis(args)
    try:
        runtime = runtime_on(server.url, args.slots)
        client = redis.Redis.from_url(server.url)
        version, allocator = client.info("server")["redis_version"], client.info("memory")["mem_allocator"]
        print(f"gate drain: {args.jobs} jobs a round, {args.slots} slots; Redis {version} ({allocator}), AOF on")
        gated, lone, empty = [], [], []
        for n in range(args.rounds):
            empty.append(empty_calls(runtime, args.jobs))
            gated.append(drain(runtime, args.jobs))
            lone.append(drain(runtime, args.jobs, lone=True))
            print(f"  round {n + 1}: held {gated[-1].script_us:.1f} us in scripts, {gated[-1].cpu_us:.1f} us CPU; "
                  f"lone owner {lone[-1].script_us:.1f}, {lone[-1].cpu_us:.1f}; "
                  f"empty call {empty[-1].script_us:.1f}, {empty[-1].cpu_us:.1f}")
        for side, drained in (("held", gated), ("lone owner", lone)):
            rows = {"in scripts": ([d.script_us for d in drained], [d.script_us for d in empty]),
                    "Redis CPU": ([d.cpu_us for d in drained], [d.cpu_us for d in empty])}
            for name, (ours, base) in rows.items():
                gate, call, ratio = paired_medians(ours, base)
                print(f"Redis us per drained job, {side}, {name}: gate {gate:.1f}, empty call {call:.1f}, "
                      f"ratio {ratio:.2f}x")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
