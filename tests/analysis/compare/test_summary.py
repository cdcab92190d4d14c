"""The summary rows of a comparison (analysis/compare/summary.py): per-iteration figures from the
phases, ratios and deltas, each row's verdict (an exact count judged, a whole-trace total not, a
figure better neither way not), the rows worth showing, and the warning when A and B were recorded
differently. Two hand-made sides worked by hand: three 900 us steps with two `.item()` each (A) or
one (B); each `.item()` is 50 us on the host and a 2 us copy on the GPU."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.compare.noise import ITERATION_TIME
from goodhart_prof.analysis.compare.summary import (NEITHER, WHOLE_TRACE, host_reads_per_iteration,
                                                    mean_iteration_us, ratio, recording_warning, shown_rows,
                                                    summary_table, syncs_per_iteration)
from tests.support.events import ann, cuda_item, load_events, op

NO_SPREAD = pd.DataFrame({"kind": [], "item": [], "verdict": []})


def side(tmp_path, items_per_step, name):
    events = []
    for it in range(3):
        base = 1000 * it
        events.append(ann(f"ProfilerStep#{it}", base, 900))
        for k in range(items_per_step):
            events += cuda_item(base + 100 + 300 * k, 100 * it + 10 * k + 1)
    return analyze(load_events(tmp_path, events, name))


def test_per_iteration_figures_from_the_phases():
    phases = pd.DataFrame({"kind": ["iteration", "iteration", "phase"], "count": [2, 1, 5],
                           "cpu_us": [300.0, 600.0, 99.0], "syncs": [4, 2, 50]})
    assert mean_iteration_us(phases) == 300.0  # (300 + 600) / 3 step instances
    assert syncs_per_iteration(phases) == 2.0
    none = phases[phases["kind"] == "phase"]
    assert math.isnan(mean_iteration_us(none)) and math.isnan(syncs_per_iteration(none))


def test_ratio_of_zeros_and_nans():
    got = ratio([2.0, 0.0, 0.0, np.nan], [1.0, 0.0, 5.0, 1.0])
    assert got[0] == 0.5 and got[1] == 1.0 and np.isnan(got[2]) and np.isnan(got[3])


def test_summary_verdicts(tmp_path):
    t = summary_table(side(tmp_path, 2, "a.json"), side(tmp_path, 1, "b.json"), NO_SPREAD).set_index("metric")
    assert t.loc["syncs_per_iteration", ["a", "b", "delta", "verdict", "why"]].tolist() == [
        2.0, 1.0, -1.0, "better", "an exact count"]
    assert t.loc["sync_points", ["a", "b", "ratio", "verdict", "why"]].tolist() == [
        6.0, 3.0, 0.5, "not judged", WHOLE_TRACE]
    assert t.loc["sync_wait_us", ["a", "b"]].tolist() == [300.0, 150.0]   # 50 us per .item()
    assert t.loc["gpu_busy_us", ["a", "b"]].tolist() == [12.0, 6.0]       # 2 us per copy
    assert t.loc["iteration_gpu_us", ["a", "b"]].tolist() == [4.0, 2.0]
    assert t.loc["iterations", ["a", "b", "delta", "verdict", "why"]].tolist() == [3.0, 3.0, 0.0, "not judged", NEITHER]
    # the iteration time's verdict is the spread table's: none here
    assert t.loc["iteration_us", ["a", "verdict", "why"]].tolist() == [900.0, "not judged",
                                                                       "no counted iterations to sample"]
    assert t.loc["exposed_comm_per_iteration_us", "why"] == "not measured on either side"
    # no communication on either side: its rows are not shown
    shown = shown_rows(t.reset_index())["metric"].tolist()
    assert "comm_us" not in shown and "straggler_wait_per_iteration_us" not in shown
    assert "gpu_busy_us" in shown and "syncs_per_iteration" in shown


def test_the_spread_tables_verdict_and_cpu_only_sides(tmp_path):
    a = analyze(load_events(tmp_path, [ann("ProfilerStep#1", 0, 100), op("aten::add", 10, 5)], "a.json"))
    b = analyze(load_events(tmp_path, [ann("ProfilerStep#1", 0, 80), op("aten::add", 10, 5)], "b.json"))
    spread = pd.DataFrame({"kind": ["iteration"], "item": [ITERATION_TIME], "verdict": ["within noise"]})
    t = summary_table(a, b, spread).set_index("metric")
    assert t.loc["iteration_us", ["a", "b", "verdict", "why"]].tolist() == [
        100.0, 80.0, "within noise", "the per-iteration intervals overlap"]
    assert t.loc["iteration_us", "ratio"] == pytest.approx(0.8)
    # no GPU on either side: the GPU rows are not shown
    assert not {"gpu_busy_us", "gpu_span_us", "kernel_us"} & set(shown_rows(t.reset_index())["metric"])


def test_recording_warning():
    lite = {"mode": "lite", "stacks": False, "device": "NVIDIA H100 80GB HBM3"}
    assert recording_warning(lite, dict(lite)) is None
    assert recording_warning(lite, {**lite, "mode": "full", "stacks": True}) == (
        "A and B were recorded differently: A was recorded in lite mode and B in full mode; their "
        "times are not comparable: record both the same way on the same machine")
    no_mode = {"mode": None, "stacks": True, "device": None}
    assert "A holds Python stacks (full mode) and B does not" in recording_warning(no_mode, {**no_mode, "stacks": False})
    assert recording_warning(lite, {**lite, "device": None}) is None  # unknown is no difference


def test_host_reads_per_iteration_counts_those_inside_steps():
    phases = pd.DataFrame({"name": ["ProfilerStep#0", "ProfilerStep#1", "rollout"],
                           "kind": ["iteration", "iteration", "phase"], "count": [1, 1, 2]})
    reads = pd.DataFrame({"iteration": [0, 0, 1, -1]})  # -1: outside every step, not counted
    assert host_reads_per_iteration(phases, reads) == 1.5
    assert host_reads_per_iteration(phases, reads.iloc[:0]) == 0.0
    assert math.isnan(host_reads_per_iteration(phases[phases["kind"] == "phase"], reads))
