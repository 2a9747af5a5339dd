"""What the soak checks at the end, attributed to the faults that were active, and printed."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import redis

from .driver import Tracked
from .faults import KINDS, Fault
from .services import TERMINAL_A2A

#: Figures that must be zero; the others are reported for what they show.
MUST_BE_ZERO = ("not_accepted", "lost", "wrong_outcome", "wrong_409", "stuck", "downstream_twice",
                "duplicate_jobs", "push_missed", "push_out_of_order", "server_errors", "stayed_down",
                "not_recovered", "effect_missing", "too_early", "tick_twice", "tick_missed", "family_wrong")
COLUMNS = (("not_accepted", "refused"), ("lost", "lost"), ("wrong_outcome", "wrong end"),
           ("wrong_409", "wrong 409"), ("stuck", "stuck"), ("downstream_twice", "dwnstr 2x"),
           ("ledger_twice", "ledger 2x*"), ("duplicate_jobs", "dup jobs"), ("push_missed", "push miss"),
           ("push_out_of_order", "push order"), ("server_errors", "5xx"), ("stayed_down", "down"),
           ("not_recovered", "no recov"), ("effect_missing", "no effect"), ("too_early", "too early"),
           ("tick_twice", "tick 2x"), ("tick_missed", "tick miss"), ("family_wrong", "children"))
A2A_FINAL = {"completed": "TASK_STATE_COMPLETED", "failed": "TASK_STATE_FAILED", "cancelled": "TASK_STATE_CANCELED"}


@dataclass
class Findings:
    per_kind: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    total: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    keys_without_ttl: int = 0

    def add(self, figure: str, kinds: Iterable[str], example: str, amount: int = 1) -> None:
        self.total[figure] += amount
        for kind in set(kinds) or {"(no fault)"}:
            self.per_kind[kind][figure] += amount
        if len(self.examples[figure]) < 5:
            self.examples[figure].append(example)

    def failed(self) -> list[str]:
        out = [f for f in MUST_BE_ZERO if self.total.get(f)]
        if self.keys_without_ttl:
            out.append("keys_without_ttl")
        return out


class Attribution:
    """A problem belongs to every fault whose window (injection to repair, plus `settle_s`) overlaps the
    span of the job it happened to (submission to its end), or the moment it happened at."""

    def __init__(self, faults: list[Fault], settle_s: float) -> None:
        self.faults = [f for f in faults if f.started]
        self.settle_s = settle_s

    def kinds(self, start: float, end: float) -> list[str]:
        return [f.kind for f in self.faults if f.started <= end and f.ended + self.settle_s >= start]


def ledger_counts(path: Path) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = defaultdict(int)
    if path.exists():
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            counts[(entry["job"], entry["step"])] += 1
    return counts


def out_of_order(updates: list[tuple[str, str]]) -> str | None:
    """Why a receiver's sequence of status updates for one task is out of order (None if it is not).

    An exact repeat of an update already delivered is skipped: delivery is at least once, and a receiver
    recognises a repeat by its timestamp (and message id)."""
    ended: str | None = None
    last_ts = ""
    seen: set[tuple[str, str]] = set()
    for state, ts in updates:
        if (state, ts) in seen:
            continue
        seen.add((state, ts))
        if ended is not None and state != ended:
            return f"{state} after {ended}"
        if ts < last_ts:
            return f"{state} at {ts} after an update at {last_ts}"
        last_ts = max(last_ts, ts)
        if state in TERMINAL_A2A:
            ended = state
    return None


def keys_without_ttl(client: redis.Redis, prefix: str) -> list[str]:
    out = []
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        if client.ttl(key) == -1:
            out.append(str(key))
    return out


def print_report(findings: Findings, faults: list[Fault], *, seed: int, jobs: list[Tracked], extra: list[str],
                 command: str) -> None:
    names = [*KINDS, "(no fault)"]
    head = f"{'fault kind':<16}{'n':>3} " + "".join(f"{label:>11}" for _, label in COLUMNS) + f"{'recovery':>14}"
    print("\n" + head)
    print("-" * len(head))
    for kind in names:
        of_kind = [f for f in faults if f.kind == kind]
        if not of_kind and kind not in findings.per_kind:
            continue
        row = findings.per_kind.get(kind, {})
        times = [f.recovery_s for f in of_kind if f.recovery_s is not None]
        recovery = f"{min(times):.1f}-{max(times):.1f}s" if times else ("-" if not of_kind else "never")
        print(f"{kind:<16}{len(of_kind):>3} " + "".join(f"{row.get(k, 0):>11}" for k, _ in COLUMNS)
              + f"{recovery:>14}")
    print("-" * len(head))
    all_times = [f.recovery_s for f in faults if f.recovery_s is not None]
    total_recovery = f"max {max(all_times):.1f}s" if all_times else "-"
    print(f"{'total':<16}{len(faults):>3} " + "".join(f"{findings.total.get(k, 0):>11}" for k, _ in COLUMNS)
          + f"{total_recovery:>14}")
    print("(a job counts under every fault active while it ran; `total` counts each job once. "
          "* ledger 2x is the documented effect-to-record window: reported, not a failure)")
    accepted = sum(1 for j in jobs if j.id)
    print(f"\njobs: {len(jobs)} started, {accepted} accepted; keys without TTL: {findings.keys_without_ttl}")
    for line in extra:
        print(line)
    for figure, examples in findings.examples.items():
        print(f"\n{figure} (first {len(examples)}):")
        for example in examples:
            print(f"  {example}")
    failed = findings.failed()
    print(f"\nseed {seed}: {'PASS' if not failed else 'FAIL: ' + ', '.join(failed)}")
    print(f"replay: {command}")
