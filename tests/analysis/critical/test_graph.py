"""The graph of the critical path (analysis/critical/graph.py) on one hand-made rank, every edge
worked out by hand from the module docstring's rules: a host thread in call order, launch edges
into kernels that start on an empty stream, kernel -> kernel gaps otherwise, and nothing for a
window without host work."""
from __future__ import annotations

import numpy as np

from goodhart_prof.analysis.critical.graph import DEP, GAP, LAUNCH, OP, RankTables, build, group_ids
from tests.support.events import kernel, load_events, op, rt

# aten::add (0..10 us) launches k1 (20..50) at 2..7; aten::mul (60..70) launches k2 (70..80) at
# 61..64 and k3 (80..90) at 65..68. Events: host 0 add, 1 launch1, 2 mul, 3 launch2, 4 launch3;
# GPU 5 k1, 6 k2, 7 k3; event k starts at node k and ends at node k + 8; times in ns.
EVENTS = [op("aten::add", 0, 10), rt("cudaLaunchKernel", 2, 5, 1), kernel("k1", 20, 30, 1),
          op("aten::mul", 60, 10), rt("cudaLaunchKernel", 61, 3, 2), rt("cudaLaunchKernel", 65, 3, 3),
          kernel("k2", 70, 10, 2), kernel("k3", 80, 10, 3)]


def edges(e):
    return list(zip(e.src.tolist(), e.dst.tolist(), e.weight.tolist(), e.kind.tolist(), e.attr.tolist()))


def test_nodes_and_queue_lengths(tmp_path):
    ctx = RankTables(load_events(tmp_path, EVENTS), 0)
    # after each launch, after each start: k2 was launched onto an empty stream, but k3 was queued
    # behind it before it started
    assert ctx.queue_launch.tolist() == [1, 1, 2] and ctx.queue_kernel.tolist() == [0, 1, 0]
    g, _, _ = build(ctx, 0, 100)
    assert (g.n, g.n_host) == (8, 5)
    assert g.node_ts.tolist() == [0, 2000, 60000, 61000, 65000, 20000, 70000, 80000,
                                  10000, 7000, 70000, 64000, 68000, 50000, 80000, 90000]


def test_host_chain_in_call_order(tmp_path):
    g, chain, _ = build(RankTables(load_events(tmp_path, EVENTS), 0), 0, 100)
    host = edges(chain)[:10]
    assert host == [
        (-1, 0, 0, DEP, -1),        # the thread's first op
        (0, 1, 2000, OP, 0),        # add's start -> launch1's start, on add
        (1, 9, 5000, OP, 1),        # launch1's own time
        (9, 8, 3000, OP, 0),        # launch1's end -> add's end, on add
        (8, 2, 0, DEP, -1),         # add -> mul: a dependency of weight 0
        (2, 3, 1000, OP, 2), (3, 11, 3000, OP, 3), (11, 4, 1000, OP, 2), (4, 12, 3000, OP, 4),
        (12, 10, 2000, OP, 2)]


def test_launch_edges_and_gaps_on_the_stream(tmp_path):
    _, chain, cross = build(RankTables(load_events(tmp_path, EVENTS), 0), 0, 100)
    stream = [e for e in edges(chain) if e[1] in (5, 6, 7, 13, 14, 15)]
    assert stream == [
        (-1, 5, 0, GAP, -1),        # k1 has no edge in its chain: its launch edge brings it
        (5, 13, 30000, OP, 5),
        (13, 6, 20000, GAP, 5),     # k2: k3 queued behind it, so the gap after k1 (20 us < 1.5 ms)
        (6, 14, 10000, OP, 6),
        (14, 7, 0, GAP, 6),         # k3: launched while k2 was queued
        (7, 15, 10000, OP, 7)]
    assert edges(cross) == [(1, 5, 18000, LAUNCH, -1)]  # launch1's start -> k1's start: 18 us


def test_a_window_without_host_work_has_no_graph(tmp_path):
    assert build(RankTables(load_events(tmp_path, EVENTS), 0), 200, 300) is None


def test_group_ids_are_dense_in_pair_order():
    assert group_ids(np.array([3, 1, 3, 1]), np.array([0, 5, 0, 2])).tolist() == [2, 1, 2, 0]
    assert group_ids(np.array([], dtype=np.int64), np.array([], dtype=np.int64)).tolist() == []
