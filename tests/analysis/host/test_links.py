"""GPU activity linked to the runtime call that launched it (analysis/host/links.py): by
(rank, correlation), driver calls too, the first of duplicate launches, -1 where the launch is not
in the trace; graph launches told apart; the join's integer keys in the pairs' order."""
from __future__ import annotations

import numpy as np

from goodhart_prof.analysis.host.links import graph_launched, gpu_launches
from tests.support.events import X, kernel, load_events, rt

EVENTS = [rt("cudaLaunchKernel", 10, 5, 1), kernel("k1", 20, 10, 1),
          kernel("k2", 40, 10, 2),                                              # its launch not traced
          rt("cudaLaunchKernel", 50, 5, 3, tid=200), rt("cudaLaunchKernel", 60, 5, 3),  # a duplicate
          kernel("k3", 70, 10, 3),
          rt("cudaGraphLaunch", 80, 5, 4), kernel("k4", 90, 10, 4),
          X("cuLaunchKernel", "cuda_driver", 100, 4, correlation=5), kernel("k5", 110, 10, 5)]


def test_each_gpu_row_gets_its_launch(tmp_path):
    trace = load_events(tmp_path, EVENTS)
    links = gpu_launches(trace)
    names = trace.events["name"].astype(str)
    assert names.loc[links["gpu_row"]].tolist() == ["k1", "k2", "k3", "k4", "k5"]  # trace.gpu's order
    launched = [names.loc[r] if r >= 0 else None for r in links["launch_row"]]
    assert launched == ["cudaLaunchKernel", None, "cudaLaunchKernel", "cudaGraphLaunch", "cuLaunchKernel"]
    assert links["launch_ts"].tolist()[:1] + links["launch_ts"].tolist()[2:] == [10.0, 50.0, 80.0, 100.0]
    assert np.isnan(links["launch_ts"].iloc[1])
    # the first of two launches with one correlation: tid 200's
    assert links["tid"].tolist() == [100, -1, 200, 100, 100] and links["pid"].iloc[1] == -1
    assert links[["ts", "end", "dur"]].iloc[0].tolist() == [20.0, 30.0, 10.0]


def test_graph_launches(tmp_path):
    trace = load_events(tmp_path, EVENTS)
    links = gpu_launches(trace)
    rows = links["launch_row"].to_numpy()
    known = rows[rows >= 0]
    assert graph_launched(trace, known).tolist() == [False, False, True, False]


def test_a_trace_without_gpu_work_has_no_links(tmp_path):
    links = gpu_launches(load_events(tmp_path, [rt("cudaLaunchKernel", 10, 5, 1)]))
    assert links.empty and "launch_row" in links


def test_launch_join_keys_order_and_match_as_the_pairs_do():
    """links._join_keys: equal keys for equal (rank, correlation) pairs and keys in the pairs'
    order, packed (correlations from -1) and, past an int64, through dense codes."""
    from goodhart_prof.analysis.host.links import _join_keys
    rng = np.random.default_rng(9)
    for corr_hi in (5000, 2 ** 61):
        r_rank, g_rank = rng.integers(0, 4, 500), rng.integers(0, 4, 700)
        r_corr = rng.integers(0, 300, 500) * (corr_hi // 300)
        g_corr = np.where(rng.random(700) < 0.1, -1, rng.integers(0, 300, 700) * (corr_hi // 300))
        r_key, g_key = _join_keys(r_rank, r_corr, g_rank, g_corr)
        pairs = list(zip(np.r_[r_rank, g_rank].tolist(), np.r_[r_corr, g_corr].tolist()))
        keys = np.r_[r_key, g_key].tolist()
        by_pair = sorted(range(len(pairs)), key=lambda i: pairs[i])
        assert [keys[i] for i in by_pair] == sorted(keys)  # the pairs' order
        assert len(set(keys)) == len(set(pairs))  # equal pairs, equal keys; distinct, distinct
    assert max(keys) < 2 ** 63 and min(g_corr) == -1
