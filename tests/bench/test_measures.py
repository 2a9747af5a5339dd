"""The benches' statistics (`bench.measures`), pure logic."""

from __future__ import annotations

import math

import pytest

from bench.measures import median_interval


def _coverage(n: int, k: int) -> float:
    """How often the k-th smallest to k-th largest of n pairs holds the true median (a sign test's level)."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n


@pytest.mark.parametrize(("n", "k"), [(6, 1), (9, 2), (21, 7)])
def test_median_interval_is_the_narrowest_that_keeps_ninety_percent(n: int, k: int) -> None:
    values = [float(v) for v in range(n, 0, -1)]  # any order: the function sorts
    low, high = median_interval(values)
    assert (low, high) == (float(k), float(n - k + 1))
    assert _coverage(n, k) >= 0.9 > _coverage(n, k + 1)


def test_median_interval_holds_the_sample_median() -> None:
    values = [1.03, 0.97, 1.10, 0.95, 1.01, 0.99, 1.07, 1.00, 0.98]
    low, high = median_interval(values)
    assert low <= sorted(values)[4] <= high
