"""The median of per-iteration values and its order-statistic interval (analysis/compare/spread.py):
known inputs worked out from the binomial coverage, NaNs dropped, fewer than 3 values unjudged,
and when two intervals overlap."""
from __future__ import annotations

import math

import numpy as np
import pytest

from goodhart_prof.analysis.compare.spread import coverage, median_interval, overlap


def test_median_interval_known_inputs():
    s = median_interval([5.0, 1.0, 3.0])
    assert (s.n, s.median, s.low, s.high) == (3, 3.0, 1.0, 5.0) and s.confidence == 0.75
    s = median_interval([4.0, 1.0, 3.0, 2.0, 6.0, 5.0, float("nan")])  # NaN dropped
    assert (s.n, s.median, s.low, s.high) == (6, 3.5, 1.0, 6.0)
    assert s.confidence == pytest.approx(1 - 2 / 64)
    # 20 values: x_(6)..x_(15), coverage 1 - 2 P(Bin(20, 1/2) <= 5) = 0.9586 (x_(7): 0.885 < 95%)
    s = median_interval(np.arange(20, 0, -1, dtype=float))
    assert (s.low, s.high, s.median) == (6.0, 15.0, 10.5)
    assert s.confidence == pytest.approx(1 - 2 * sum(math.comb(20, i) for i in range(6)) / 2 ** 20)
    assert coverage(20, 6) >= 0.95 > coverage(20, 7)
    few = median_interval([1.0, 2.0])
    assert not few.judged and few.median == 1.5 and math.isnan(few.low) and math.isnan(few.confidence)
    assert median_interval([]).n == 0


def test_coverage_of_the_extremes():
    # [min, max] of n values misses the median only when all n fall on one side: 2 / 2^n
    assert coverage(5, 1) == pytest.approx(1 - 2 / 32)
    assert coverage(3, 1) == 0.75
    # a lower confidence asked for: the interval narrows to x_(7)..x_(14) at 20 values (0.885)
    s = median_interval(np.arange(1, 21, dtype=float), confidence=0.85)
    assert (s.low, s.high) == (7.0, 14.0)
    assert s.confidence == pytest.approx(coverage(20, 7))


def test_overlap():
    a, b, c = median_interval([1, 2, 3]), median_interval([3, 4, 5]), median_interval([3.5, 4, 5])
    assert overlap(a, b) and overlap(b, a)  # touching at 3
    assert not overlap(a, c) and not overlap(c, a)
    assert not overlap(a, median_interval([1, 2]))  # no interval: never "overlap", never judged
