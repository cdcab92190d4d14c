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
from goodhart_prof.analysis.intervals import thread_groups
from goodhart_prof.analysis.links import gpu_launches
from goodhart_prof.analysis.tree import host as tree_host
from goodhart_prof.analysis.tree import iterations
from goodhart_prof.cli import cli
from goodhart_prof.report.common import ROW_LIMIT
from goodhart_prof.trace.load import load
from goodhart_prof.trace.model import merged_gpu_tid

DATA = Path(__file__).parent / "data"


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
    threads' kernels overlap): one gap of 170 + 10 r us, in the gap table, its summary and the
    idle causes of every rank."""
    a = analyze(load(many_ranks, progress=False))
    assert [(b.rank, b.device) for b in a.burstiness] == [(r, 0) for r in range(25)]
    for b in a.burstiness:
        assert b.gaps["count"] == len(b.gap_table) == 1
        assert b.gaps["max_us"] == pytest.approx(170.0 + 10 * b.rank)
        assert b.gap_table["dur_us"].sum() == pytest.approx(b.gaps["total_us"])
        assert sum(c["idle_us"] for c in b.idle_causes) == pytest.approx(b.gaps["total_us"])


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
from goodhart_prof.analysis.intervals import merge_intervals  # noqa: E402


def test_merge_intervals_before_time_zero():
    """Blocks that end before time 0 keep their own end (their ends were clamped to 0.0, so a
    device active only at negative times was busy up to 0)."""
    bs, be = merge_intervals(np.array([-10.0, -8.0, -3.0]), np.array([-5.0, -6.0, -1.0]))
    np.testing.assert_array_equal(bs, [-10.0, -3.0])
    np.testing.assert_array_equal(be, [-5.0, -1.0])
