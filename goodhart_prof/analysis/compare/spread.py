"""Noise: the median of per-iteration values and a distribution-free interval around it.

A compared time figure is not one number but one value per traced iteration. Its **spread** is
the median of those values and a confidence interval of that median from the order statistics:
[x_(k), x_(n+1-k)] with the largest k whose coverage 1 - 2 P(Bin(n, 1/2) <= k - 1) is at least
`CONFIDENCE` (95%). Why this interval and not a bootstrap:

- it holds for any continuous distribution (iteration times are skewed: a busy machine adds
  long stalls, never short ones), with no normality assumption;
- it is exact and deterministic: no resampling, no seed, the same figures on every machine;
- with the few iterations a trace holds, a bootstrap of the median is coarse and too narrow
  (it can only return sample values, and misses the tails); the order-statistic interval for
  n <= 8 is [min, max], whose coverage (1 - 2^(1-n): 94% at n = 5, 97% at n = 6) is stated;
- with many values (metrics.jsonl's untraced iterations) it narrows as it should.

Two figures are **within noise** when their intervals overlap. Overlap of two ~95% intervals is a
conservative test (a real difference whose intervals still touch is reported as noise, never the
reverse), which is the side a user optimising a loop needs: a "better" must be believable.
Fewer than `MIN_ITERATIONS` (3) values: no interval, nothing can be concluded about time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
MIN_ITERATIONS = 3


@dataclass(frozen=True)
class Spread:
    """Median of n per-iteration values and its interval [low, high] (NaN when n < 3)."""

    n: int
    median: float
    low: float
    high: float
    confidence: float  # the interval's coverage of the true median (NaN without an interval)

    @property
    def judged(self) -> bool:
        return self.n >= MIN_ITERATIONS


def coverage(n: int, k: int) -> float:
    """P(x_(k) <= true median <= x_(n+1-k)) for n values of a continuous distribution."""
    tail = sum(math.comb(n, i) for i in range(k)) / 2.0 ** n
    return 1.0 - 2.0 * tail


def median_interval(values, confidence: float = CONFIDENCE) -> Spread:
    """The median of values (NaNs dropped) and its order-statistic interval (module docstring)."""
    x = np.sort(np.asarray(values, dtype=float))
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return Spread(0, math.nan, math.nan, math.nan, math.nan)
    median = float(np.median(x))
    if n < MIN_ITERATIONS:
        return Spread(n, median, math.nan, math.nan, math.nan)
    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(n, k + 1) >= confidence:
        k += 1
    return Spread(n, median, float(x[k - 1]), float(x[n - k]), coverage(n, k))


def overlap(a: Spread, b: Spread) -> bool:
    """Both intervals exist and share at least one point."""
    return a.judged and b.judged and a.low <= b.high and b.low <= a.high
