"""`diff` always says what its machine-drift check found (issue 39): held, changed (every time
verdict withheld), or not checked with why, never a silent None read as "no drift"."""
from __future__ import annotations

import pandas as pd

from goodhart_prof.analysis.compare.noise import Noise
from goodhart_prof.analysis.compare.spread import Spread
from goodhart_prof.analysis.compare.verdicts import drift_statement, speed_check


def side(cost: "Spread | None") -> Noise:
    empty = pd.DataFrame()
    return Noise(iterations=[1, 2, 3], warmup=[], samples=empty, throughput=empty, counts=empty,
                 profiler_cost=cost)


def cost(median: float, low: float, high: float) -> Spread:
    return Spread(n=5, median=median, low=low, high=high, confidence=0.94)


def test_costs_that_overlap_mean_the_machine_held():
    a, b = side(cost(1.10, 1.05, 1.20)), side(cost(1.15, 1.12, 1.30))  # 1.12-1.20 shared
    assert drift_statement(a, b) is None
    assert speed_check(a, b) == ("held: the traced iterations took 1.10x (1.05-1.20x) the untraced ones in A "
                                 "and 1.15x (1.12-1.30x) in B, within each other's spread")


def test_costs_apart_withhold_time_verdicts():
    a, b = side(cost(1.10, 1.05, 1.20)), side(cost(1.60, 1.50, 1.70))
    assert speed_check(a, b) == "changed: " + drift_statement(a, b)
    assert "nothing can be concluded about time" in speed_check(a, b)


def test_a_side_without_a_run_record_is_not_checked():
    held = side(cost(1.10, 1.05, 1.20))
    assert drift_statement(side(None), held) is None  # the old silence: read as "no drift"
    assert speed_check(side(None), held).startswith("not checked: A has no run record")
    assert speed_check(held, side(None)).startswith("not checked: B has no run record")
    both = speed_check(side(None), side(None))
    assert both.startswith("not checked: A and B have no run record") and "assume it did" in both
