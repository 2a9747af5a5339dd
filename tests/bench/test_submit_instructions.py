"""Redis's instructions per submit (`bench.submit_instructions`), counted by valgrind's callgrind on a real Redis:
two runs of the same requests give the same figure, and the product's submit script shows against the bare
route's LPUSH."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import submit_instructions as bench

PRIORITY = "submit with a priority, fair shares on"


def test_two_runs_of_the_same_requests_count_the_same_and_the_script_outweighs_one_lpush() -> None:
    first, second = (bench.measure(300, 300, rows=[PRIORITY, bench.BARE]) for _ in range(2))
    assert list(first) == [PRIORITY, bench.BARE]
    # The bare route's count, a fortieth of the product's, carries the server's own background work (its timer,
    # the AOF's flushes) more than the script's does.
    for row, within in ((PRIORITY, 0.02), (bench.BARE, 0.10)):
        assert abs(first[row] - second[row]) / first[row] < within, (row, first[row], second[row])
    # One script of some twenty commands against one LPUSH; the bare route's count is not nothing either.
    assert first[PRIORITY] > 5 * first[bench.BARE] > 0


def test_the_report_gives_each_row_against_the_bare_route() -> None:
    lines = bench.report({PRIORITY: 500_000.0, bench.BARE: 10_000.0}).splitlines()
    assert lines[1].split()[-2:] == ["500,000", "50.00x"]
    assert lines[2].split()[-2:] == ["10,000", "1.00x"]


def test_a_counter_of_a_process_not_under_callgrind_fails_plainly(tmp_path: Path) -> None:
    # callgrind_control exits 0 when it finds no such process: a zero that did nothing must not pass unseen.
    with pytest.raises(RuntimeError, match="failed"):
        bench.Callgrind(os.getpid(), tmp_path).zero()
