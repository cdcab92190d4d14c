"""Phases: CPU time, GPU time launched and sync points per annotation and per iteration."""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from goodhart_prof.analysis.host.phases import COLUMNS, RANK_COLUMNS, phases, phases_by_rank
from goodhart_prof.analysis.host.syncs import sync_points
from goodhart_prof.trace.load import load
from goodhart_prof.report.json_report import phases_json
from tests.support.helpers import clean_env, run_cmd, write_tiny_config
from tests.support.events import ann, cuda_item, kernel, load_events, rt
from tests.support.paths import DATA


def one_rank(row: dict, rank: int = 0) -> dict:
    """A phase row of a single-rank trace: the rank's own figures, the rank columns repeating it."""
    return {**row, "ranks": 1, "median_rank": rank, "cpu_max_us": row["cpu_us"], "max_rank": rank}


def launch(ts, corr, gpu_ts, gpu_dur, tid=100):
    return [rt("cudaLaunchKernel", ts, 3, corr, tid=tid), kernel(f"k{corr}", gpu_ts, gpu_dur, corr)]


def test_hand_built_phases(tmp_path):
    events = [
        ann("ProfilerStep#1", 0, 1000), ann("ProfilerStep#2", 1000, 500),
        ann("rollout", 10, 390), *launch(20, 1, 2000, 30), *launch(50, 2, 2040, 20),
        *cuda_item(100, 90),                                  # 1 sync and a 2 us DtoH memcpy
        ann("rollout", 500, 100), *launch(510, 3, 2100, 7),
        *launch(700, 4, 2200, 11),                            # in the step, in no annotation
        ann("gae", 25, 100, tid=200), *launch(30, 5, 2300, 13, tid=200),  # another thread
        *launch(1100, 6, 2400, 4), rt("cudaDeviceSynchronize", 1200, 10, 7),
        kernel("no_launch", 2500, 99, 77),                    # its launch is not in the trace
    ]
    trace = load_events(tmp_path, events)
    points = sync_points(trace)
    table = phases(trace, points)
    assert list(table.columns) == COLUMNS
    rows = {r["name"]: r for r in table.to_dict("records")}
    assert list(table["name"]) == ["rollout", "gae", "ProfilerStep#1", "ProfilerStep#2"]
    assert rows["rollout"] == one_rank({"name": "rollout", "kind": "annotation", "iteration": -1,
                                        "count": 2, "cpu_us": 490.0, "gpu_us": 30 + 20 + 2 + 7,
                                        "gpu_kernels": 3, "syncs": 1})
    assert rows["gae"] == one_rank({"name": "gae", "kind": "annotation", "iteration": -1, "count": 1,
                                    "cpu_us": 100.0, "gpu_us": 13.0, "gpu_kernels": 1, "syncs": 0})
    assert rows["ProfilerStep#1"] == one_rank({"name": "ProfilerStep#1", "kind": "iteration",
                                               "iteration": 1, "count": 1, "cpu_us": 1000.0,
                                               "gpu_us": 30 + 20 + 2 + 7 + 11 + 13, "gpu_kernels": 5,
                                               "syncs": 1})
    assert rows["ProfilerStep#2"] == one_rank({"name": "ProfilerStep#2", "kind": "iteration",
                                               "iteration": 2, "count": 1, "cpu_us": 500.0,
                                               "gpu_us": 4.0, "gpu_kernels": 1, "syncs": 1})
    doc = phases_json(table)
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc
    assert doc[0] == rows["rollout"] and type(doc[0]["count"]) is int


def test_no_annotations(tmp_path):
    trace = load_events(tmp_path, launch(0, 1, 10, 5))
    table = phases(trace, sync_points(trace))
    assert table.empty and list(table.columns) == COLUMNS and phases_json(table) == []


@pytest.mark.slow
def test_trainer_trace_phases(tmp_path):
    cfg = write_tiny_config(tmp_path)  # rollout_steps 8, epochs 1, minibatches 2
    out = tmp_path / "out"
    res = run_cmd(["-m", "trainer", "--config", str(cfg), "--total-iterations", "3",
                   "--output-dir", str(out)],
                  env=clean_env(PROF_ENABLED="1", PROF_ITERATIONS="1-2", PROF_MODE="full"))
    assert res.returncode == 0, res.stderr
    trace = load(out)
    points = sync_points(trace)
    table = phases(trace, points)
    rows = {r["name"]: r for r in table.to_dict("records")}
    # policy_act: 8 steps and the last-value forward; store: once per step, and the last step's
    # final values after the last-value forward
    per_iteration = {"rollout": 1, "env_step": 8, "policy_act": 9, "store": 9,
                     "gae": 1, "ppo_update": 1, "minibatch": 2, "optimizer_step": 2, "logging": 1}
    for name, n in per_iteration.items():
        assert rows[name]["count"] == 2 * n, name
        assert rows[name]["kind"] == "annotation" and rows[name]["cpu_us"] > 0
    steps = table[table["kind"] == "iteration"]
    assert list(steps["name"]) == ["ProfilerStep#1", "ProfilerStep#2"]
    assert list(steps["iteration"]) == [1, 2] and list(steps["count"]) == [1, 1]
    assert (table["gpu_us"] == 0).all() and (table["gpu_kernels"] == 0).all()  # CPU run
    assert steps["syncs"].sum() == points["iteration"].isin([1, 2]).sum()
    assert rows["rollout"]["cpu_us"] < steps["cpu_us"].sum()
    assert rows["ppo_update"]["syncs"] >= rows["minibatch"]["syncs"] >= rows["optimizer_step"]["syncs"]
    assert json.loads(json.dumps(phases_json(table), allow_nan=False))


# -- several ranks: never a sum over ranks ---------------------------------------------------------
OURS_2RANK = DATA / "ours" / "cpu_2rank_merged.json.gz"


def raw_per_rank(path: Path, names: set[str]) -> dict[tuple[int, str], list[float]]:
    """Durations of the named annotations per (rank, name), read straight from the JSON (the
    merged layout: pid = rank)."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    out: dict[tuple[int, str], list[float]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e["name"] in names:
            out.setdefault((int(e["pid"]), e["name"]), []).append(float(e["dur"]))
    return out


def test_two_rank_trace_phases_per_rank_and_over_ranks():
    trace = load(OURS_2RANK)
    assert trace.ranks == [0, 1]
    points = sync_points(trace)
    by_rank = phases_by_rank(trace, points)
    table = phases(trace, points)
    names = {"ProfilerStep#1", "ProfilerStep#2", "minibatch", "rollout", "policy_act"}
    raw = raw_per_rank(OURS_2RANK, names)
    for name in names:
        mine = by_rank[by_rank["name"] == name].set_index("rank")
        assert sorted(mine.index) == [0, 1], name
        for rank in (0, 1):
            durs = raw[(rank, name)]
            assert mine.loc[rank, "count"] == len(durs)
            assert mine.loc[rank, "cpu_us"] == pytest.approx(math.fsum(durs), abs=1e-6)
        row = table[table["name"] == name].iloc[0]
        totals = {r: math.fsum(raw[(r, name)]) for r in (0, 1)}
        fast, slow = sorted(totals, key=lambda r: (totals[r], r))
        # two ranks: the lower middle one is the median rank, the other the slowest; never the sum
        assert row["ranks"] == 2 and row["median_rank"] == fast and row["max_rank"] == slow
        assert row["cpu_us"] == pytest.approx(totals[fast], abs=1e-6)
        assert row["cpu_max_us"] == pytest.approx(totals[slow], abs=1e-6)
        assert row["count"] == len(raw[(fast, name)])
        assert row["cpu_us"] < totals[0] + totals[1]
    steps = table[table["kind"] == "iteration"]
    assert list(steps["name"]) == ["ProfilerStep#1", "ProfilerStep#2"] and list(steps["count"]) == [1, 1]
    doc = phases_json(table)
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc
    assert {"ranks", "median_rank", "cpu_max_us", "max_rank"} <= set(doc[0])
    assert set(phases_json(by_rank)[0]) == set(RANK_COLUMNS)


def test_median_rank_of_three_and_ties(tmp_path):
    """Three ranks' steps of 300, 100 and 200 us: the median is rank 2's, the slowest rank 0's;
    with equal times the lower rank is the slowest."""
    events = []
    for rank, dur in ((0, 300), (1, 100), (2, 200)):
        events += [{"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}},
                   ann("ProfilerStep#4", 0, dur, pid=rank, tid=1), ann("gae", 5, 50, pid=rank, tid=1)]
    trace = load_events(tmp_path, events)
    assert trace.ranks == [0, 1, 2]
    rows = {r["name"]: r for r in phases(trace, sync_points(trace)).to_dict("records")}
    assert rows["ProfilerStep#4"] == {"name": "ProfilerStep#4", "kind": "iteration", "iteration": 4,
                                      "count": 1, "cpu_us": 200.0, "gpu_us": 0.0, "gpu_kernels": 0,
                                      "syncs": 0, "ranks": 3, "median_rank": 2, "cpu_max_us": 300.0,
                                      "max_rank": 0}
    assert (rows["gae"]["cpu_us"], rows["gae"]["median_rank"], rows["gae"]["max_rank"]) == (50.0, 1, 0)
