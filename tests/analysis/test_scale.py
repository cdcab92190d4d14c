"""Many threads, many ranks, many devices: the vectorised paths equal the per-entity ones, and a
report over many devices or ranks caps its rows (scripts/bench_shapes.py measures the speed)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from goodhart_prof.analysis import analyze

from goodhart_prof.analysis.gpu.burstiness import burstiness
from goodhart_prof.analysis.gpu.device_time import device_table, gpu_time
from goodhart_prof.analysis.gpu.idle import UNTRACED
from goodhart_prof.analysis.intervals import (dense_codes, merge_intervals, per_segment, segment_cumsum,
                                              segment_merge, segment_searchsorted, thread_groups, tuple_codes)
from goodhart_prof.analysis.tree import frame_forest, host_tree
from goodhart_prof.analysis.host.links import gpu_launches
from goodhart_prof.analysis.tree import host as tree_host
from goodhart_prof.analysis.iterations import iterations
from goodhart_prof.cli import cli
from goodhart_prof.report.common import ROW_LIMIT
from goodhart_prof.trace.load import load
from goodhart_prof.trace.model import merged_gpu_tid
from tests.support.paths import DATA



def _merged(ranks: int, threads_per_rank: int = 2, idle_of=lambda r: 10.0 * r) -> dict:
    """A merged trace (merge.py's layout): per rank, on each of its threads, an op launching a
    kernel, then after `idle_of(rank)` us another; one ProfilerStep#0 per rank around it all.
    Correlation ids repeat on every rank (as they do in real rank files)."""
    events = []
    for r in range(ranks):
        events.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}})
        events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": r, "tid": 1,
                       "ts": 0.0, "dur": 1000.0 + idle_of(r)})
        corr = 0
        for t in range(1, threads_per_rank + 1):
            for k, at in enumerate((10.0 * t, 10.0 * t + 200.0 + idle_of(r))):
                corr += 1
                events.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{k}", "pid": r, "tid": t,
                               "ts": at, "dur": 8.0, "args": {"External id": corr}})
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": r,
                               "tid": t, "ts": at + 1, "dur": 4.0, "args": {"correlation": corr}})
                events.append({"ph": "X", "cat": "kernel", "name": f"kernel_{k}", "pid": r,
                               "tid": merged_gpu_tid(0, 7), "ts": at + 6, "dur": 20.0,
                               "args": {"device": 0, "stream": 7, "correlation": corr}})
    return {"traceEvents": events}


@pytest.fixture(scope="module")
def many_ranks(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("scale") / "merged_25.json"
    path.write_text(json.dumps(_merged(25)))
    return path


def _host_nodes(trace):
    ev = trace.events
    sel = np.flatnonzero(ev["cat"].isin(["cpu_op", "user_annotation"]).to_numpy())
    col = {c: ev[c].to_numpy()[sel] for c in ("rank", "pid", "tid", "ts", "dur", "end")}
    return thread_groups(pd.DataFrame({c: col[c] for c in ("rank", "pid", "tid")})), col


@pytest.mark.parametrize("name", ["hta/v100_ddp_rank1.json.gz", "param/dlrm_8rank",
                                  "kineto/resnet50_v100_2021.pt.trace.json.gz",
                                  "ours/cpu_2rank_merged.json.gz", "tracelens/mi300_resnet_act_checkpoint_train.json.gz"])
def test_host_tree_all_threads_at_once_equals_thread_by_thread(name):
    """The many-thread build (one pass over all threads) gives the per-thread build's order,
    parents, depths and thread spans, on real multi-thread and multi-rank traces."""
    groups, col = _host_nodes(load(DATA / name, progress=False))
    assert len(groups) >= 2
    each, at_once = tree_host._each_thread(groups, col), tree_host._all_threads(groups, col)
    for a, b in zip(each[:3], at_once[:3]):
        np.testing.assert_array_equal(a, b)
    assert each[3] == at_once[3]


def test_host_tree_many_threads(many_ranks, monkeypatch):
    """Past MANY_THREADS the tree is built at once; with the limit raised, thread by thread: the
    same tree (50 threads on 25 ranks; each op's parent is its rank's ProfilerStep#0 on thread 1)."""
    trace = load(many_ranks, progress=False)
    monkeypatch.setattr(tree_host, "MANY_THREADS", 1)
    fast = tree_host._build(trace)
    monkeypatch.setattr(tree_host, "MANY_THREADS", 10 ** 9)
    slow = tree_host._build(trace)
    assert len(fast.threads) == 50 and fast.threads == slow.threads
    np.testing.assert_array_equal(fast.parent, slow.parent)
    np.testing.assert_array_equal(fast.row, slow.row)
    names = fast.names[fast.name]
    held = (names != "ProfilerStep#0") & (fast.tid == 1)
    assert (names[fast.parent[held]] == "ProfilerStep#0").all()
    assert (fast.parent[fast.tid == 2] == -1).all()


def test_launches_join_per_rank_with_repeated_correlations(many_ranks):
    """Correlation ids repeat on every rank: each kernel joins its own rank's launch."""
    trace = load(many_ranks, progress=False)
    links = gpu_launches(trace)
    assert len(links) == 25 * 4 and (links["launch_row"] >= 0).all()
    launch_rank = trace.events["rank"].to_numpy()[links["launch_row"].to_numpy()]
    np.testing.assert_array_equal(launch_rank, links["rank"].to_numpy())
    # the launch began 5 us before its kernel, on every rank
    np.testing.assert_allclose(links["ts"] - links["launch_ts"], 5.0)


def test_iterations_over_many_ranks(many_ranks):
    """ProfilerStep#0 of rank r spans [0, 1000 + 10 r]: a time inside it is iteration 0 on that
    rank only; past its end, or on a rank without steps, -1."""
    trace = load(many_ranks, progress=False)
    rank = np.array([0, 0, 3, 3, 24, 24, 25])
    ts = np.array([500.0, 1001.0, 1030.0, 1031.0, 1240.0, 1240.5, 10.0])
    assert iterations(trace, rank, ts).tolist() == [0, -1, 0, -1, 0, -1, -1]


def test_idle_per_device_over_many_ranks(many_ranks):
    """Rank r's kernels form two busy blocks, [16, 46] and [216 + 10 r, 246 + 10 r] (the two
    threads' kernels overlap): one gap of 170 + 10 r us, in the gap table and its summary; the
    idle causes also hold the idle inside the rank's ProfilerStep#0 [0, 1000 + 10 r] before the
    first kernel (16 us) and after the last (754 us): 940 + 10 r us, its idle within the step."""
    a = analyze(load(many_ranks, progress=False))
    assert [(b.rank, b.device) for b in a.burstiness] == [(r, 0) for r in range(25)]
    for b in a.burstiness:
        assert b.gaps["count"] == len(b.gap_table) == 1
        assert b.gaps["max_us"] == pytest.approx(170.0 + 10 * b.rank)
        assert b.gap_table["dur_us"].sum() == pytest.approx(b.gaps["total_us"])
        step_idle = float(a.gpu["step_idle_us"].iloc[b.rank])
        assert sum(c["idle_us"] for c in b.idle_causes) == pytest.approx(step_idle) == 940.0 + 10 * b.rank


def test_text_report_caps_rows_per_device_and_rank(many_ranks):
    """25 devices: each per-device table shows ROW_LIMIT (20) rows, the ones with the most idle
    time (the highest ranks here), and says how many more; --json keeps every device."""
    out = CliRunner().invoke(cli, ["analyze", str(many_ranks)], terminal_width=200)
    assert out.exit_code == 0, out.output
    text = out.output
    assert ROW_LIMIT == 20
    assert text.count("... and 5 more devices (the 20 with the most idle time are shown; --json lists all)") == 2
    assert text.count("... and 5 more devices (the 20 with the most idle time in gaps are shown; "
                      "--json lists all)") == 2
    gpu_section = text.split("GPU time", 1)[1].split("... and 5 more devices", 1)[0]
    shown = sorted(int(r) for r in re.findall(r"rank (\d+) / gpu 0", gpu_section))
    assert shown == list(range(5, 25))
    doc = json.loads(CliRunner().invoke(cli, ["analyze", str(many_ranks), "--json"]).output)
    assert len(doc["burstiness"]) == 25


def test_few_devices_are_not_capped():
    out = CliRunner().invoke(cli, ["analyze", str(DATA / "param" / "dlrm_8rank")], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert "more devices" not in out.output and "more ranks" not in out.output
    assert len(set(re.findall(r"rank (\d) / gpu \d", out.output))) == 8


# -- pinning the all-devices-at-once paths (exact values on small multi-device inputs) ------------


def test_merge_intervals_before_time_zero():
    """Blocks that end before time 0 keep their own end (their ends were clamped to 0.0, so a
    device active only at negative times was busy up to 0)."""
    bs, be = merge_intervals(np.array([-10.0, -8.0, -3.0]), np.array([-5.0, -6.0, -1.0]))
    np.testing.assert_array_equal(bs, [-10.0, -3.0])
    np.testing.assert_array_equal(be, [-5.0, -1.0])


def _segments(rng, n_seg: int, longest: int):
    lengths = rng.integers(0, longest + 1, n_seg)
    bounds = np.r_[0, np.cumsum(lengths)]
    return bounds


def test_tuple_codes_of_integer_columns_equal_the_lexsort_definition():
    """Integer and bool columns are packed into one key (tuple_codes' fast path): the codes equal
    those of the lexicographic sort of the rows, with negative values and wide spans too."""
    rng = np.random.default_rng(5)
    for _ in range(100):
        n = int(rng.integers(1, 400))
        cols = [rng.integers(-5, 5, n), rng.integers(0, 2**40, n), rng.random(n) < 0.5,
                rng.integers(0, 3, n).astype(np.int32)][: int(rng.integers(1, 5))]
        order = np.lexsort(cols[::-1])
        change = np.zeros(n, dtype=bool)
        change[0] = True
        for c in cols:
            change[1:] |= c[order][1:] != c[order][:-1]
        want = np.empty(n, dtype=np.int64)
        want[order] = np.cumsum(change) - 1
        assert tuple_codes(*cols).tolist() == want.tolist()


def test_dense_codes_equal_numpy_unique():
    """dense_codes (counting) gives np.unique's values and inverse, whatever the spread of codes
    (a spread too wide for counting falls back to the sort)."""
    rng = np.random.default_rng(3)
    for n, high in ((0, 1), (1, 1), (1000, 10), (50_000, 3000), (500, 10**8)):
        values = rng.integers(0, high, n).astype(np.int32)
        got, inverse = dense_codes(values)
        want, want_inverse = np.unique(values, return_inverse=True)
        assert got.dtype == want.dtype and got.tolist() == want.tolist()
        assert inverse.tolist() == want_inverse.ravel().tolist()


def test_segment_helpers_equal_numpy_on_each_segment():
    """segment_searchsorted, segment_cumsum, per_segment and segment_merge give, bit for bit,
    what numpy gives on each segment alone (segments of 0 to 40 values, ties, both sides)."""
    rng = np.random.default_rng(7)
    bounds = _segments(rng, 300, 40)
    values = np.round(rng.exponential(100.0, bounds[-1]) * rng.choice([1e-3, 1.0, 1e6], bounds[-1]), 1)
    ends = values + np.round(rng.exponential(50.0, len(values)), 1)
    sorted_values = values.copy()
    for a, b in zip(bounds[:-1], bounds[1:]):
        sorted_values[a:b].sort()
    # 300 distinct segments: the vectorised binary search; 12: one searchsorted per segment
    for used in (300, 12):
        seg = rng.integers(0, used, 2000)
        queries = np.where(rng.random(2000) < 0.3, sorted_values[np.minimum(bounds[seg], len(values) - 1)],
                           rng.exponential(100.0, 2000))
        for side in ("left", "right"):
            got = segment_searchsorted(sorted_values, bounds[seg], bounds[seg + 1], queries, side)
            want = [bounds[i] + np.searchsorted(sorted_values[bounds[i]:bounds[i + 1]], q, side)
                    for i, q in zip(seg, queries)]
            np.testing.assert_array_equal(got, want)
    cum = segment_cumsum(values, bounds)
    pct = per_segment(values, bounds, lambda m: np.column_stack((np.percentile(m, [50, 90, 99], axis=1).T,
                                                                  m.sum(axis=1), m.std(axis=1))))
    starts, stops, block_bounds = segment_merge(values, ends, bounds)
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        assert cum[a:b].tolist() == np.cumsum(values[a:b]).tolist()
        bs, be = merge_intervals(values[a:b], ends[a:b])
        assert starts[block_bounds[i]:block_bounds[i + 1]].tolist() == bs.tolist()
        assert stops[block_bounds[i]:block_bounds[i + 1]].tolist() == be.tolist()
        if b > a:
            r = values[a:b]
            assert pct[i].tolist() == [*np.percentile(r, [50, 90, 99]).tolist(), r.sum(), r.std()]
        else:
            assert np.isnan(pct[i]).all()


def _kernel(corr, ts, dur, device, pid=0, tid=7):
    return {"ph": "X", "cat": "kernel", "name": f"k{corr}", "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": {"device": device, "stream": 7, "correlation": corr}}


def _host(name, ts, dur, cat="cpu_op", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


@pytest.fixture(scope="module")
def two_gpus_one_thread(tmp_path_factory) -> Path:
    """One host thread (ops A [0, 100], B [100, 200], C [205, 300]; a Python frame over B
    exactly) launching onto GPU 0 and GPU 1; GPU 2 runs at negative times, its launches not in
    the trace."""
    events = [_host("A", 0, 100), _host("B", 100, 100), _host("C", 205, 95),
              _host("train.py(10): step", 100, 100, cat="python_function"),
              *[_host("cudaLaunchKernel", t, 1, cat="cuda_runtime", correlation=c)
                for c, t in ((1, 1), (2, 2), (3, 206), (4, 207))],
              _kernel(1, 10, 40, 0), _kernel(3, 250, 10, 0),     # GPU 0: gap [50, 250]
              _kernel(2, 20, 100, 1), _kernel(4, 210, 20, 1),    # GPU 1: gap [120, 210]
              _kernel(9, -30, 10, 2, pid=2), _kernel(8, -25, 10, 2, pid=2), _kernel(7, -10, 5, 2, pid=2)]
    path = tmp_path_factory.mktemp("gpus") / "two_gpus.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_device_figures_pinned(two_gpus_one_thread):
    """busy, idle and gaps of three devices from one table: GPU 2's blocks [-30, -15] and
    [-10, -5] keep their negative ends (busy 20 us, idle 5 us; it was busy 30 us, up to 0)."""
    trace = load(two_gpus_one_thread, progress=False)
    t = device_table(trace)
    assert t.device.tolist() == [0, 1, 2] and t.bounds.tolist() == [0, 2, 4, 7]
    assert t.block_starts.tolist() == [10.0, 250.0, 20.0, 210.0, -30.0, -10.0]
    assert t.block_ends.tolist() == [50.0, 260.0, 120.0, 230.0, -15.0, -5.0]
    g = gpu_time(trace).set_index("device")
    assert g["busy_us"].tolist() == [50.0, 120.0, 20.0]
    assert g["idle_us"].tolist() == [200.0, 90.0, 5.0]
    assert g["kernel_us"].tolist() == [50.0, 120.0, 25.0]
    b = {x.device: x for x in burstiness(trace)}
    assert b[0].gap_start.tolist() == [50.0] and b[0].gap_end.tolist() == [250.0]
    assert b[0].gaps["by_class"]["host_wait"] == {"count": 1, "total_us": 200.0}
    assert b[1].gaps["by_class"]["host_wait"] == {"count": 1, "total_us": 90.0}
    assert b[2].gaps["by_class"]["other"] == {"count": 0, "total_us": 0.0}
    assert b[2].gaps["by_class"]["launch"] == {"count": 1, "total_us": 5.0}
    assert b[2].burstiness_B == pytest.approx(-1 / 3)  # starts -30, -25, -10: intervals 5, 15


def test_idle_causes_of_several_gpus_over_one_thread(two_gpus_one_thread):
    """Each GPU's gap is cut at the thread's own times inside it: GPU 0's [50, 250] is A 50, B 100
    (under the frame), untraced 5 (between B and C), C 45; GPU 1's [120, 210] is B 80, untraced 5,
    C 5. GPU 2's launches are not in the trace: its rank's main thread (the only one) stands in."""
    b = {x.device: x for x in burstiness(load(two_gpus_one_thread, progress=False))}
    as_tuples = {d: [(c["cause"], c["idle_us"], c["share"], c["frame"]) for c in b[d].idle_causes] for d in b}
    assert as_tuples[0] == [("B", 100.0, 0.5, "train.py(10): step"), ("A", 50.0, 0.25, None),
                            ("C", 45.0, 0.225, None), (UNTRACED, 5.0, 0.025, None)]
    assert as_tuples[1] == [("B", 80.0, 80 / 90, "train.py(10): step"), (UNTRACED, 5.0, 5 / 90, None),
                            ("C", 5.0, 5 / 90, None)]  # ties: by name
    assert as_tuples[2] == [(UNTRACED, 5.0, 1.0, None)]  # [-15, -10]: before the thread's first op


@pytest.mark.parametrize("name", ["ours/cpu_full_mode.pt.trace.json.gz", "param/dlrm_8rank"])
def test_enclosing_over_all_threads_matches_the_definition(name):
    """HostTree.enclosing and FrameForest.enclosing (all threads in one search) give, for every
    host event's start instant and for spans over each op, the latest node / frame of the same
    thread that starts at or before the start and ends at or after the end."""
    trace = load(DATA / name, progress=False)
    tree = host_tree(trace)
    rng = np.random.default_rng(3)
    pick = rng.choice(len(tree), min(300, len(tree)), replace=False)
    ts, end = tree.ts[pick], np.where(rng.random(len(pick)) < 0.5, tree.ts[pick], tree.end[pick])
    key = (tree.rank[pick], tree.pid[pick], tree.tid[pick])
    got = tree.enclosing(*key, ts, end)
    for i, g in enumerate(got.tolist()):
        lo, hi = tree.threads[(int(key[0][i]), int(key[1][i]), int(key[2][i]))]
        ok = np.flatnonzero((tree.ts[lo:hi] <= ts[i]) & (tree.end[lo:hi] >= end[i]))
        assert g == (lo + ok[-1] if len(ok) else -1)
    if len(trace.frames):
        forest = frame_forest(trace)
        got = forest.enclosing(*key, ts, end)
        for i, g in enumerate(got.tolist()):
            thread = forest.spans.lookup(key[0][i:i + 1], key[1][i:i + 1], key[2][i:i + 1])[0]
            if thread < 0:
                assert g == -1
                continue
            lo, hi = forest.spans.lo[thread], forest.spans.hi[thread]
            ok = np.flatnonzero((forest.ts[lo:hi] <= ts[i]) & (forest.end[lo:hi] >= end[i]))
            assert g == (lo + ok[-1] if len(ok) else -1)


def _one_thread_many_gpus(gpus: int, units: int = 6000) -> dict:
    """`units` ops on one host thread, each launching one kernel, round robin over `gpus` GPUs
    (one process each); the same events whatever the number of GPUs."""
    events = []
    for i in range(units):
        t = 40.0 * i
        events.append(_host("aten::mm", t, 20.0))
        events.append(_host("cudaLaunchKernel", t + 2, 5.0, cat="cuda_runtime", correlation=i + 1))
        events.append(_kernel(i + 1, t + 9, 12.0, i % gpus, pid=i % gpus))
    return {"traceEvents": events}


def test_many_gpus_over_one_thread_each_get_their_own_figures(tmp_path):
    """600 GPUs each idling across one host thread, analysed all at once: device g runs every
    600th kernel (12 us at 40 us * i + 9), so each has 9 gaps of 600 * 40 - 12 = 23,988 us, and
    in each gap the host is in aten::mm for 599 * 20 + 9 = 11,989 us and idle for the rest
    (11,999 us). Every device must get exactly these figures (the speed of this shape is measured
    by scripts/bench_shapes.py, not here)."""
    path = tmp_path / "g600.json"
    path.write_text(json.dumps(_one_thread_many_gpus(600)))
    devices = burstiness(load(path, progress=False))
    assert len(devices) == 600
    assert sorted(b.device for b in devices) == list(range(600))
    for b in devices:
        assert b.gaps["count"] == 9 and b.gaps["total_us"] == 215_892.0
        assert b.gaps["by_class"]["host_wait"] == {"count": 9, "total_us": 215_892.0}
        assert [(c["cause"], c["idle_us"]) for c in b.idle_causes] == [
            ("(host idle / not traced)", 9 * 11_999.0), ("aten::mm", 9 * 11_989.0)]


@pytest.mark.parametrize("name", ["param/dlrm_8rank", "tracelens/h100_owlv2_inference.json.gz"])
def test_idle_causes_the_same_in_small_chunks(name, monkeypatch):
    """Summed in chunks of a few pieces (each (device, thread) whole) and through np.unique
    instead of dense bins, the idle causes are the same, bit for bit."""
    from goodhart_prof.analysis.gpu import idle
    whole = [b.idle_causes for b in burstiness(load(DATA / name, progress=False))]
    monkeypatch.setattr(idle, "CHUNK_PIECES", 3)
    monkeypatch.setattr(idle, "DENSE_BINS", 1)
    chunked = [b.idle_causes for b in burstiness(load(DATA / name, progress=False))]
    assert chunked == whole and any(whole)
