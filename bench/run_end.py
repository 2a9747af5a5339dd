"""What a run's end costs with fair shares on against off, for a lone owner's jobs, with no worker beside it.

Usage: python -m bench.run_end [--jobs 2000] [--rounds 6] [--slots 2] [--redis-server PATH]

Each round submits one owner's no-op jobs, claims them all, then ends each run as a worker does
(`RedisStore.transition` to completed with the gate's leave that `DispatchGate.leaving` gives, the guess of the short
way kept across runs as in a worker): with fair shares on, past the slots they were sent past the gate and end the
short way (`gate/finish_bypassed.lua`); with them off, they never entered it. The two sides alternate, each on a
queue and key prefix of its own in one Redis. Printed per round and as medians: this process's CPU per run's end
(the Python around the call), Redis's time in scripts and Redis's CPU, and the ratio on / off of each. The runner
row of `bench.run --only dispatch` measures the same ends inside real drains, where pairs of drains move by more
than this difference; this is the figure a change to a run's last transition is judged by.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import Runtime
from tasks_backend.store.claims import ClaimTerms

from .gate_drain import own_redis, own_redis_args, redis_cpu_s, runtime_on
from .measures import paired_medians
from .procs import script_usec


@dataclass(frozen=True)
class Ends:
    """Per run's end: this process's CPU (us), Redis's time in scripts (us, its clock), Redis's CPU (us); and how
    many ends took the short way."""

    python_us: float
    script_us: float
    redis_cpu_us: float
    short: int


def ends(runtime: Runtime, jobs: int) -> Ends:
    """`jobs` jobs of one owner submitted and claimed, then their runs ended one by one; measured over the ends."""
    service, store = runtime.service, runtime.store
    gate, lookup = service.admission, service.registry.get
    records = []
    for _ in range(jobs):
        record, _ = service.submit("bench", "bench.noop", {})
        outcome, claimed = store.claim(record.id, ClaimTerms(600_000, "bench", 3))
        if outcome != "ok" or claimed is None:
            raise RuntimeError(f"job {record.id} could not be claimed: {outcome}")
        records.append(claimed)
    client, short = store.redis, 0
    scripts_before, cpu_before, python_before = script_usec(client), redis_cpu_s(client), time.process_time()
    for record in records:
        leave = gate.leaving(record, JobState.COMPLETED.value, lookup)
        outcome, _, _ = store.transition(record.id, JobState.COMPLETED, token=record.token, unschedule=False,
                                         leave=leave)
        if outcome != "ok":
            raise RuntimeError(f"job {record.id} did not complete: {outcome}")
        if leave is not None:
            short += bool(leave.lone and leave.released == [] and leave.bypassed)
            gate.left(leave)
    python_us = (time.process_time() - python_before) * 1e6 / jobs
    ended = Ends(python_us, (script_usec(client) - scripts_before) / jobs,
                 (redis_cpu_s(client) - cpu_before) * 1e6 / jobs, short)
    client.delete(runtime.settings.queue, store.keys.bypass_queue(runtime.settings.queue))
    return ended


def main(argv: list[str] | None = None) -> int:
    args = own_redis_args(__doc__.splitlines()[0], 2000, 6, argv)
    server = own_redis(args)
    try:
        sides = {side: runtime_on(server.url, args.slots, fair=side == "on", key_prefix=f"ends-{side}",
                                  queue=f"ends-{side}") for side in ("on", "off")}
        print(f"run ends: {args.jobs} jobs of one owner a round, {args.slots} slots, fair shares on vs off")
        measured: dict[str, list[Ends]] = {"on": [], "off": []}
        for n in range(args.rounds):
            for side in ("on", "off") if n % 2 == 0 else ("off", "on"):
                measured[side].append(ends(sides[side], args.jobs))
            on, off = measured["on"][-1], measured["off"][-1]
            print(f"  round {n + 1}: python {on.python_us:.1f} / {off.python_us:.1f} us, in scripts "
                  f"{on.script_us:.1f} / {off.script_us:.1f}, Redis CPU {on.redis_cpu_us:.1f} / {off.redis_cpu_us:.1f}"
                  f" (on / off; {on.short} of {args.jobs} ended the short way)")
        for name, figure in (("python CPU", "python_us"), ("Redis in scripts", "script_us"),
                             ("Redis CPU", "redis_cpu_us")):
            on, off, ratio = paired_medians([getattr(e, figure) for e in measured["on"]],
                                            [getattr(e, figure) for e in measured["off"]])
            print(f"us per run's end, {name}: on {on:.1f}, off {off:.1f}, ratio on/off {ratio:.2f}x")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
