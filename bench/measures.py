"""The measures: each runs the product and its baseline in alternating order and returns one row."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import load
from .load import Load, Run


@dataclass
class Row:
    """One line of the table: medians of the product and the baseline, and the median of paired ratios."""

    name: str
    unit: str
    target: str
    product: float
    baseline: float | None = None
    ratio: float | None = None
    passed: bool | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    base_p50_ms: float | None = None
    base_p99_ms: float | None = None
    note: str = ""
    samples: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Meter:
    """What a run costs, read before and after it: CPU seconds used so far by each process (a whole process
    tree: a gunicorn master and its workers, a Celery worker and its pool) and Redis commands served so far
    (a script and each call in it counted). A row divides the difference by the requests or jobs of the run."""

    cpu: Callable[[], dict[str, float]]
    commands: Callable[[], int]

    def read(self) -> tuple[dict[str, float], int]:
        return self.cpu(), self.commands()


#: One run's cost per request (or job): CPU seconds by process, and Redis commands under the key "commands".
Cost = dict[str, float]


@dataclass(frozen=True)
class Plan:
    seconds: float
    reps: int
    connections: int
    threads: int
    flow_connections: int
    warm_s: float
    mcp_seconds: float
    runner_jobs: int
    runner_reps: int
    latency_jobs: int
    small_handles: int
    large_handles: int


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def paired_medians(ours: list[float], base: list[float]) -> tuple[float, float, float]:
    """For runs taken in pairs: each side's median, and the median of the pairs' ratios (ours / base)."""
    return median(ours), median(base), median([a / b for a, b in zip(ours, base, strict=True)])


def paired(name: str, unit: str, target: str, minimum: float, plan: Plan,
           product: Callable[[], Run], baseline: Callable[[], Run], figure: Callable[[Run], float],
           settle: Callable[[], None] | None = None, meter: Meter | None = None) -> Row:
    """Run both sides `plan.reps` times, alternating who goes first; the ratio is product / baseline.

    `settle` runs before each run: where a run leaves work behind (jobs its calls created and a worker
    still runs), that work must not run inside the next run's window, the other side's included.
    With a `meter`, the row's note gives each side's cost per request or job (`profile_note`)."""
    ours: list[Run] = []
    theirs: list[Run] = []
    our_costs: list[Cost] = []
    their_costs: list[Cost] = []
    for rep in range(plan.reps):
        order = (ours, our_costs, product), (theirs, their_costs, baseline)
        for runs, costs, fn in order if rep % 2 == 0 else reversed(order):
            if settle is not None:
                settle()
            before = meter.read() if meter else None
            runs.append(fn())
            if meter and before:
                costs.append(_cost(before, meter.read(), figure(runs[-1]) * runs[-1].seconds))
    row = _row(name, unit, target, minimum, ours, theirs, figure)
    if meter:
        row.note = "; ".join(x for x in (row.note, profile_note(our_costs, their_costs, unit)) if x)
        row.samples["cost"] = {"product": our_costs, "baseline": their_costs}
    return row


def _cost(before: tuple[dict[str, float], int], after: tuple[dict[str, float], int], units: float) -> Cost:
    """The difference of two meter readings per request or job; a process started meanwhile counts whole."""
    if units <= 0:
        return {}
    cost = {name: (seconds - before[0].get(name, 0.0)) / units for name, seconds in after[0].items()}
    cost["commands"] = (after[1] - before[1]) / units
    return cost


def profile_note(ours: list[Cost], theirs: list[Cost], unit: str) -> str:
    """Each side's median cost per request or job: 'CPU us per req, product: web 420, redis 90; baseline: ...
    Redis commands per req: 9.0; 3.0'. Processes under 5 us are left out (idle ones, the other side's)."""
    per = "job" if unit.startswith("jobs") else "req"

    def side(costs: list[Cost]) -> str:
        names = sorted({name for cost in costs for name in cost if name != "commands"})
        spent = {name: 1e6 * median([cost.get(name, 0.0) for cost in costs]) for name in names}
        return ", ".join(f"{name} {us:.0f}" for name, us in sorted(spent.items(), key=lambda x: -x[1]) if us >= 5)

    commands = "; ".join(f"{median([c.get('commands', 0.0) for c in costs]):.1f}" for costs in (ours, theirs))
    return (f"CPU us per {per}, product side: {side(ours)}; baseline side: {side(theirs)}. "
            f"Redis commands per {per}: {commands}")


def together(name: str, unit: str, target: str, minimum: float, plan: Plan, product: Load, baseline: Load,
             figure: Callable[[Run], float], settle: Callable[[], None] | None = None) -> Row:
    """Both sides loaded at once, `plan.reps` times, each by its own wrk with half the usual threads: they share
    the machine at the same moments, so a drift in its speed (a virtual machine's) moves both alike, and the
    ratio says what one side's request costs against the other's. The ratio is product / baseline."""
    ours: list[Run] = []
    theirs: list[Run] = []
    threads = max(1, plan.threads // 2)
    with ThreadPoolExecutor(2) as pool:
        for _ in range(plan.reps):
            if settle is not None:
                settle()
            mine, other = (pool.submit(load.run, side, seconds=plan.seconds, connections=plan.connections,
                                       threads=threads) for side in (product, baseline))
            ours.append(mine.result())
            theirs.append(other.result())
    return _row(name, unit, target, minimum, ours, theirs, figure)


def _row(name: str, unit: str, target: str, minimum: float, ours: list[Run], theirs: list[Run],
         figure: Callable[[Run], float]) -> Row:
    """The row of runs taken in pairs: medians of each side, and the median of the pairs' ratios."""
    ratios = [figure(a) / figure(b) if figure(b) else float("nan") for a, b in zip(ours, theirs, strict=True)]
    ratio = median(ratios)
    errors = sum(r.errors + r.failures for r in ours + theirs)
    return Row(name, unit, target, median([figure(r) for r in ours]), median([figure(r) for r in theirs]),
               ratio, ratio >= minimum, median([r.p50_ms for r in ours]), median([r.p99_ms for r in ours]),
               median([r.p50_ms for r in theirs]), median([r.p99_ms for r in theirs]),
               note=f"{errors} errors" if errors else "",
               samples={"product": [figure(r) for r in ours], "baseline": [figure(r) for r in theirs],
                        "ratio": ratios})


def quiet(min_idle: float = 0.85, window_s: float = 0.25, timeout_s: float = 60.0) -> None:
    """Wait until the machine is idle (at least `min_idle` of every core's time over `window_s`), so that no
    process, of either side, is still working off what an earlier run left it (a queue of created jobs,
    say). Gives up quietly after `timeout_s`: a machine that never quiets is visible in the figures."""
    def busy_idle() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]  # idle + iowait

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        total0, idle0 = busy_idle()
        time.sleep(window_s)
        total1, idle1 = busy_idle()
        if total1 > total0 and (idle1 - idle0) / (total1 - total0) >= min_idle:
            return


def fixed(target: Load, plan: Plan) -> Callable[[], Run]:
    return lambda: load.run(target, seconds=plan.seconds, connections=plan.connections, threads=plan.threads)


def flow(target: Load, plan: Plan) -> Callable[[], Run]:
    return lambda: load.run(target, seconds=plan.seconds, connections=plan.flow_connections, threads=0)


def warm(plan: Plan, *targets: Load) -> None:
    """One short run each, so that every process has imported, connected and filled its caches."""
    if plan.warm_s:
        for target in targets:
            load.run(target, seconds=plan.warm_s, connections=4, threads=2)


def drain_rate(queue_length: Callable[[], int], total: int, start: Callable[[], Any],
               cpu: Callable[[], dict[str, float]] = dict, timeout_s: float = 300.0) -> tuple[float, dict[str, float]]:
    """Messages/s taken off a full queue between 90% and 10% left, sampled every few ms, and the CPU
    seconds per message that each process named by `cpu` spent meanwhile.

    Timing only the middle of the drain leaves out worker start-up and the last stragglers.
    """
    start()
    hi, lo = int(total * 0.9), int(total * 0.1)
    first: tuple[float, int, dict[str, float]] | None = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now, left = time.perf_counter(), queue_length()
        if first is None and left <= hi:
            first = (now, left, cpu())
        if first is not None and left <= lo:
            done, spent = first[1] - left, cpu()
            per_job = {name: (spent[name] - first[2].get(name, 0.0)) / done for name in spent} if done else {}
            return (done / (now - first[0]) if now > first[0] else float("nan")), per_job
        time.sleep(0.003)
    raise RuntimeError("the queue did not drain in time")


def cpu_note(samples: list[dict[str, float]]) -> str:
    """Median CPU us per job of a worker's main process, its pool and Redis, as 'main/pool/Redis'."""
    return "/".join(f"{1e6 * median([s[name] for s in samples]):.0f}" for name in ("worker", "pool", "redis"))


def calls_note(samples: list[dict[str, float]]) -> str:
    """Median Redis commands per job (a script and each call in it counted), and how many were scripts."""
    total = median([sum(s.values()) for s in samples])
    return f"{total:.1f} ({median([s.get('evalsha', 0.0) for s in samples]):.1f} scripts)"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def median_interval(values: list[float], level: float = 0.9) -> tuple[float, float]:
    """The narrowest interval of order statistics, k-th smallest to k-th largest, that holds the true median
    with at least `level` (a sign test's interval: it assumes nothing of how pairs spread). With nine pairs
    that is the second smallest to the second largest (96%); with six, the smallest to the largest (97%)."""
    ordered, n = sorted(values), len(values)
    k = 1
    while k < n // 2 and 1 - 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n >= level:
        k += 1
    return ordered[k - 1], ordered[n - k]
