"""What a trace runs once before its loop (analysis/setup.py): per rank, from its first event to
its first iteration or, without iterations, its first kernel launch; the host-to-device copies,
runtime calls and outermost ops in it; points in setup dropped. Hand-made traces worked by hand."""
from __future__ import annotations

import numpy as np
import pandas as pd

from goodhart_prof.analysis.setup import drop_setup, in_setup, setup, setup_bounds
from tests.support.events import ann, launch, load_events, memcpy, op, rt


def htod(ts, corr):
    """A 4 KiB pageable host-to-device copy of 30 us."""
    event = memcpy("Memcpy HtoD (Pageable -> Device)", ts, 30, corr)
    event["args"]["bytes"] = 4096
    return event


# an upload (aten::to, 0..100) and an allocation before the first kernel launch at 1000; a second
# upload after it (2000), which is the loop's, not setup's
EVENTS = [op("aten::to", 0, 100), rt("cudaMemcpyAsync", 10, 50, 1), htod(20, 1),
          rt("cudaMalloc", 150, 300, -1),
          *launch("k", 1000, 2, op_name="aten::mm"),
          op("aten::to", 1995, 100), rt("cudaMemcpyAsync", 2000, 50, 3), htod(2010, 3)]


def test_without_iterations_setup_ends_at_the_first_kernel_launch(tmp_path):
    trace = load_events(tmp_path, EVENTS)
    assert setup_bounds(trace).to_dict("records") == [
        {"rank": 0, "start": 0.0, "end": 1000.0, "bound": "first kernel launch"}]
    s = setup(trace)
    assert s.ranks.drop(columns=["rank", "start", "end", "bound"]).to_dict("records") == [
        {"dur_us": 1000.0, "htod_copies": 1, "htod_bytes": 4096.0, "htod_gpu_us": 30.0}]
    assert s.calls == [{"kind": "alloc", "name": "cudaMalloc", "count": 1, "total_us": 300.0}]
    # outermost ops starting before 1000: the upload, and the op around the first launch (999)
    assert s.ops == [{"name": "aten::to", "count": 1, "total_us": 100.0},
                     {"name": "aten::mm", "count": 1, "total_us": 8.0}]


def test_the_first_iteration_ends_setup(tmp_path):
    trace = load_events(tmp_path, EVENTS + [ann("ProfilerStep#1", 500, 3000)])
    assert setup_bounds(trace).to_dict("records") == [
        {"rank": 0, "start": 0.0, "end": 500.0, "bound": "first iteration"}]
    s = setup(trace)
    assert (s.ranks["htod_copies"].tolist(), s.ranks["dur_us"].tolist()) == ([1], [500.0])
    assert [o["name"] for o in s.ops] == ["aten::to"]  # aten::mm at 999 is in the loop now


def test_in_setup_and_drop_setup(tmp_path):
    trace = load_events(tmp_path, EVENTS)
    # the end is exclusive; a rank without a setup has none
    assert in_setup(trace, [0, 0, 1], [999, 1000, 0]).tolist() == [True, False, False]
    assert in_setup(trace, [], []).tolist() == []
    points = pd.DataFrame({"rank": [0, 0, 0], "ts": [10.0, 1500.0, 999.5], "kind": ["a", "b", "c"]})
    assert drop_setup(trace, points)["kind"].tolist() == ["b"]
    assert drop_setup(trace, points.iloc[:0]).empty


def test_nothing_to_bound_no_setup(tmp_path):
    s = setup(load_events(tmp_path, [op("aten::add", 0, 10)]))  # no iteration, no launch
    assert s.empty and s.calls == [] and s.ops == []
    assert list(s.ranks.columns) == ["rank", "start", "end", "bound", "dur_us", "htod_copies",
                                     "htod_bytes", "htod_gpu_us"]


def test_first_event_per_rank_as_a_groupby_finds_it():
    """setup's start per rank: read off the rank-sorted events, or by pandas where a table built
    by hand is not in rank order; NaN starts skipped, a rank without events NaN."""
    from goodhart_prof.analysis.setup import _first_ts
    ranks = np.array([0, 1, 2, 5])
    for ev in (pd.DataFrame({"rank": [0, 0, 1, 1, 2], "ts": [3.0, 1.0, np.nan, 7.0, np.nan]}),
               pd.DataFrame({"rank": [1, 0, 1, 0, 2], "ts": [9.0, 4.0, 2.0, np.nan, 6.0]}),
               pd.DataFrame({"rank": np.zeros(0, dtype=np.int32), "ts": np.zeros(0)})):
        ref = ev.groupby("rank", sort=True)["ts"].min().reindex(ranks).to_numpy(float)
        np.testing.assert_array_equal(_first_ts(ev, ranks), ref)
