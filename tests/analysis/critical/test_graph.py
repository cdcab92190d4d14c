"""The graph of the critical path (analysis/critical/graph.py) on one hand-made rank, every edge
worked out by hand from the module docstring's rules: a host thread in call order, launch edges
into kernels that start on an empty stream, kernel -> kernel gaps otherwise, and nothing for a
window without host work; CUDA event waits against HTA's own graph."""
from __future__ import annotations

import numpy as np

import gzip
import json

from goodhart_prof.analysis.critical.graph import DEP, GAP, LAUNCH, OP, SYNC, RankTables, build, group_ids
from goodhart_prof.trace.load import load
from tests.support.events import kernel, load_events, op, rt
from tests.support.hta_table import read_hta
from tests.support.paths import DATA

WAITS = DATA / "ours" / "critical" / "event_waits.json.gz"  # its docstring: event_waits.py beside it
WAITS_HTA = DATA / "ours" / "critical" / "event_waits_hta.tsv"  # HTA 0.5.0's graph of it

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


HTA_KIND = {LAUNCH: "critical_path_kernel_launch_delay", GAP: "critical_path_kernel_kernel_delay",
            SYNC: "critical_path_sync_dependency"}


def gpu_edges(g, chain, cross) -> list:
    """The launch, kernel -> kernel and sync edges as HTA's generator writes them: (type, source,
    destination, weight in us), a node as (event name, ts, "start" or "end")."""
    def node(k):
        name = g.ctx.names[g.ctx.code[g.pos[k % g.n]]]
        return [str(name), round(g.t0 + g.node_ts[k] / 1000), "start" if k < g.n else "end"]
    return sorted([HTA_KIND[k], node(u), node(v), w // 1000] for e in (chain, cross)
                  for u, v, w, k in zip(e.src.tolist(), e.dst.tolist(), e.weight.tolist(), e.kind.tolist())
                  if u >= 0 and k in HTA_KIND)


def test_event_wait_edges_are_htas():
    # Every launch, kernel -> kernel and sync edge of the fixture's graph is one of HTA's, and HTA
    # has no other: by hand (event_waits.py's docstring), KB waits for KA with no launch edge (KA
    # ends after KB's launch); KE for KC beside the 0 us gap after KD (KC ended before KD);
    # KF for KE only (KE ends after KF's launch and after KC); KG for KC with its launch wait;
    # KH for KF only; cudaEventSynchronize's end for KB (Event Sync).
    trace = load(WAITS, progress=False)
    g, chain, cross = build(RankTables(trace, 0), trace.events["ts"].min(), trace.events["end"].max())
    ours = gpu_edges(g, chain, cross)
    assert ours == read_hta(WAITS_HTA)["with_wait_args"]["gpu_edges"]
    waits = [e[1:3] for e in ours if e[0] == HTA_KIND[SYNC] and e[2][0].startswith("K")]
    assert waits == [[["KA", 520, "end"], ["KB", 525, "start"]], [["KC", 735, "end"], ["KE", 822, "start"]],
                     [["KC", 735, "end"], ["KG", 770, "start"]], [["KE", 832, "end"], ["KF", 835, "start"]],
                     [["KF", 1035, "end"], ["KH", 1036, "start"]]]
    assert [HTA_KIND[SYNC], ["KB", 625, "end"], ["cudaEventSynchronize", 630, "end"], 0] in ours


def test_a_wait_on_activity_outside_the_window_is_no_wait():
    # From 20 us on, KA's launch (at 10) is outside: KA is not in the graph, so KB has no wait
    # and is reached by its own launch edge (stream 8 was empty): 30 -> 525, 495 us. The Event
    # Sync (at 100) is in the window and still ends its call after KB.
    trace = load(WAITS, progress=False)
    g, chain, cross = build(RankTables(trace, 0), 20, trace.events["end"].max())
    ours = gpu_edges(g, chain, cross)
    assert not [e for e in ours if e[1][0] == "KA" or e[2][0] == "KA"]
    assert [e for e in ours if e[2][0] == "KB"] == [
        [HTA_KIND[LAUNCH], ["cudaLaunchKernel", 30, "start"], ["KB", 525, "start"], 495]]
    assert [HTA_KIND[SYNC], ["KB", 625, "end"], ["cudaEventSynchronize", 630, "end"], 0] in ours



def test_an_event_sync_counts_where_hta_clips_it_in(tmp_path):
    # HTA keeps a cuda_sync event without a stream if it starts in the window and lasts: the
    # fixture's Event Sync moved to start at 25 us (its call still at 100) is outside a window
    # from 28 us on (which still holds KB's launch at 30 and the call), and one of no duration is
    # nowhere: then no edge into cudaEventSynchronize's end.
    doc = json.loads(gzip.decompress(WAITS.read_bytes()))
    sync = next(e for e in doc["traceEvents"] if e["name"] == "Event Sync")
    into_call = [HTA_KIND[SYNC], ["KB", 625, "end"], ["cudaEventSynchronize", 630, "end"], 0]
    for ts, dur, start, kept in ((25, 605, 0, True), (25, 605, 28, False), (100, 0, 0, False)):
        sync.update(ts=ts, dur=dur)
        path = tmp_path / f"{ts}_{dur}_{start}.json"
        path.write_text(json.dumps(doc))
        trace = load(path, progress=False)
        g, chain, cross = build(RankTables(trace, 0), start, trace.events["end"].max())
        ours = gpu_edges(g, chain, cross)
        assert (into_call in ours) == kept, (ts, dur, start)
        assert [e for e in ours if e[2][0] == "KB"][0][1][0] == ("KA" if start == 0 else "cudaLaunchKernel")
