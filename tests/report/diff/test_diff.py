"""A/B diff: compare() on a trace against itself, on real different traces (checked against each
trace's own analysis), on a hand-built pair, and the `goodhart-prof diff` command's outputs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.compare.comparison import compare
from tests.support.helpers import run_main
from goodhart_prof.report.diff.document import SCHEMA, to_document
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

H100 = DATA / "tracelens" / "h100_owlv2_inference.json.gz"
V100 = DATA / "hta" / "v100_ddp_rank1.json.gz"
DLRM = DATA / "param" / "dlrm_8rank"  # a copy of ../shared/traces
TABLES = ("categories", "kernels", "sync_kinds", "sync_sites", "devices", "phases")


@pytest.fixture(scope="module")
def h100():
    return analyze(load(H100))


@pytest.fixture(scope="module")
def v100():
    return analyze(load(V100))


def paired_columns(frame: pd.DataFrame, suffix: str) -> list[str]:
    return [c for c in frame.columns if c.endswith(suffix)]


# -- a trace against itself ------------------------------------------------------------------------
def test_trace_against_itself_is_all_zero(h100):
    c = compare(h100, analyze(load(H100)))  # a second, independent load and analysis
    for name in TABLES:
        frame = getattr(c, name)
        assert len(frame), name
        deltas, ratios = paired_columns(frame, "_delta"), paired_columns(frame, "_ratio")
        assert deltas and len(deltas) == len(ratios)
        values = frame[deltas].to_numpy(float)
        assert (values[~np.isnan(values)] == 0).all(), name
        r = frame[ratios].to_numpy(float)
        # NaN only where the quantity itself is undefined on both sides (never here for H100).
        assert (r[~np.isnan(r)] == 1).all() and not np.isnan(r).any(), name
        if "presence" in frame:
            assert set(frame["presence"]) == {"both"}, name
    # H100 has no communication: its rank figures are undefined on both sides (null, not 0)
    undefined = c.summary[c.summary[["a", "b"]].isna().any(axis=1)]
    assert set(undefined["metric"]) == {"exposed_comm_per_iteration_us", "straggler_wait_per_iteration_us"}
    assert undefined[["a", "b", "delta", "ratio"]].isna().all().all()
    defined = c.summary.drop(undefined.index)
    assert (defined["delta"] == 0).all() and (defined["ratio"] == 1).all()
    assert c.communication.empty
    assert c.headline.empty and c.better.empty and c.worse.empty
    assert c.devices["label"].tolist() == ["rank0/gpu0"]
    doc = to_document(c)
    json.dumps(doc, allow_nan=False)
    assert doc["headline"] == {"better": [], "worse": []}


# -- two real, different traces --------------------------------------------------------------------
def by(frame: pd.DataFrame, key: str, column: str) -> dict:
    return dict(zip(frame[key].astype(str), frame[column]))


def check_against_own_analyses(c, a, b) -> None:
    """Every category, kernel and sync-kind delta equals B's figure minus A's (0 when absent)."""
    for table, key in ((c.categories, "category"), (c.kernels, "name")):
        own_a = by(a.categories if key == "category" else a.kernels, key, "total_us")
        own_b = by(b.categories if key == "category" else b.kernels, key, "total_us")
        count_a = by(a.categories if key == "category" else a.kernels, key, "count")
        count_b = by(b.categories if key == "category" else b.kernels, key, "count")
        assert set(table[key]) == set(own_a) | set(own_b)
        for r in table.itertuples():
            name = getattr(r, key)
            assert r.total_us_a == pytest.approx(own_a.get(name, 0.0))
            assert r.total_us_b == pytest.approx(own_b.get(name, 0.0))
            assert r.total_us_delta == pytest.approx(own_b.get(name, 0.0) - own_a.get(name, 0.0), abs=1e-6)
            assert r.count_delta == count_b.get(name, 0) - count_a.get(name, 0)
            assert r.presence == ("both" if name in own_a and name in own_b else
                                  "a_only" if name in own_a else "b_only")
    kinds = c.sync_kinds.set_index("kind")
    for kind, n in a.syncs.by_kind.items():
        assert kinds.at[kind, "count_delta"] == b.syncs.by_kind[kind] - n
    assert c.summary.set_index("metric").at["sync_points", "delta"] == b.syncs.total - a.syncs.total


def mean_step_us(a) -> float:
    steps = a.phases[a.phases["kind"] == "iteration"]
    return float(steps["cpu_us"].sum() / steps["count"].sum())


def test_h100_against_v100(h100, v100):
    c = compare(h100, v100)
    check_against_own_analyses(c, h100, v100)
    cats = c.categories.set_index("category")
    # Figures from each trace's own analysis (docs/report.md / test_gpu_time_kernels check them against
    # TraceLens and HTA): reduction 262,629.125 us on the H100 (its layer norms, 4,242.816 us,
    # are `norm` since the taxonomy split them out), 37,056 us on the V100.
    assert cats.at["reduction", "total_us_delta"] == pytest.approx(37_056.0 - 262_629.125)
    assert cats.at["communication", "presence"] == "b_only"
    assert cats.at["communication", "total_us_a"] == 0 and np.isnan(cats.at["communication", "total_us_ratio"])
    assert cats.at["conv", "total_us_ratio"] == 0
    kinds = c.sync_kinds.set_index("kind")
    assert (kinds.at["memcpy_dtoh", "count_a"], kinds.at["memcpy_dtoh", "count_b"]) == (55, 0)
    assert kinds.at["device_sync", "count_delta"] == -1
    # One device each, with different ids: paired.
    d = c.devices.iloc[0]
    assert len(c.devices) == 1 and d.label == "rank0/gpu0 vs rank1/gpu1" and d.presence == "both"
    assert d.utilization_delta == pytest.approx(v100.gpu["utilization"].iloc[0] - h100.gpu["utilization"].iloc[0])
    assert d.busy_us_a == pytest.approx(566_759.473, rel=1e-7)
    assert d.gap_count_b == v100.burstiness[0].gaps["count"]
    s = c.summary.set_index("metric")
    assert s.at["iteration_us", "a"] == pytest.approx(mean_step_us(h100))
    assert s.at["iteration_us", "b"] == pytest.approx(mean_step_us(v100))
    assert s.at["iteration_us", "ratio"] == pytest.approx(mean_step_us(v100) / mean_step_us(h100))
    assert (s.at["iterations", "a"], s.at["iterations", "b"]) == (1, 5)
    # The H100 trace has one traced iteration: nothing can be concluded about time, and the
    # headline holds counts only, better first, each group by impact (counts without one last).
    assert "nothing can be concluded about time: A has 1 counted iteration" in c.time_statement
    h = c.headline
    assert set(h["kind"]) <= {"sync", "host_read", "kernels"} and not h.empty
    # time is not judged; a figure seen on one side only says so instead (never better/worse)
    assert c.spread["verdict"].isin(["not judged", "only in A", "only in B"]).all()
    assert (c.spread["verdict"] == "not judged").any()
    verdicts = h["verdict"].tolist()
    assert verdicts == sorted(verdicts)  # "better" < "worse"
    for frame in (c.better, c.worse):
        impact = frame["impact_us"].to_numpy()
        known = impact[np.isfinite(impact)]
        assert (np.diff(known) <= 0).all() and np.isfinite(impact[: len(known)]).all()
    assert ((h["delta"] < 0) == (h["verdict"] == "better")).all()
    memcpy_dtoh = c.better[(c.better["kind"] == "sync") & (c.better["item"] == "memcpy_dtoh")].iloc[0]
    # per iteration: 55 in the H100's one step, none in the V100's five
    assert (memcpy_dtoh.a, memcpy_dtoh.b, memcpy_dtoh.metric) == (55, 0, "count_per_iteration")
    assert memcpy_dtoh.impact_us == pytest.approx(h100.sync_points.query("kind == 'memcpy_dtoh'")["dur"].sum())
    doc = json.loads(json.dumps(to_document(c, top=5), allow_nan=False))
    assert doc["schema"] == SCHEMA and len(doc["kernels"]) == 5
    assert len(doc["headline"]["better"]) == min(5, len(c.better)) and doc["time_statement"] == c.time_statement
    assert doc["devices"][0]["rank_b"] == 1 and doc["categories"][0]["total_us_ratio"] is not None


@pytest.mark.skipif(not DLRM.is_dir(), reason=f"shared traces not found at {DLRM}")
def test_two_dlrm_ranks():
    a = analyze(load(DLRM / "worker0_step_12.pt.trace.json.gz"))
    b = analyze(load(DLRM / "worker1_step_12.pt.trace.json.gz"))
    c = compare(a, b)
    check_against_own_analyses(c, a, b)
    assert len(c.devices) == 1 and c.devices.iloc[0]["presence"] == "both"
    d = c.devices.iloc[0]
    for q in ("busy_us", "span_us", "utilization"):
        assert d[f"{q}_delta"] == pytest.approx(b.gpu[q].iloc[0] - a.gpu[q].iloc[0])
    sites = c.sync_sites
    own = {(k, s): n for k, s, n in a.syncs.sites[["kind", "site", "count"]].itertuples(index=False)}
    assert sites["count_a"].sum() == a.syncs.total and sites["count_b"].sum() == b.syncs.total
    for r in sites.itertuples():
        assert r.count_a == own.get((r.kind, r.site), 0)
    phases = c.phases.set_index("name")
    ann = a.phases[a.phases["kind"] == "annotation"].set_index("name")
    assert phases.loc[ann.index, "cpu_us_a"].tolist() == pytest.approx(ann["cpu_us"].tolist())


@pytest.mark.skipif(not DLRM.is_dir(), reason=f"shared traces not found at {DLRM}")
def test_eight_rank_folder_against_itself_matches_devices_by_rank():
    a = analyze(load(DLRM))
    c = compare(a, a)
    assert len(c.devices) == 8 and (c.devices["presence"] == "both").all()
    assert (c.devices["rank_a"] == c.devices["rank_b"]).all() and c.headline.empty


# -- a hand-built pair: B drops three .item() syncs and halves a kernel ----------------------------
GPU_PID, STREAM = 0, 7


def X(name, cat, ts, dur, pid=100, tid=100, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def gpu(name, cat, ts, dur, corr):
    return X(name, cat, ts, dur, pid=GPU_PID, tid=STREAM, device=0, stream=STREAM, correlation=corr)


def launch(ts, corr, gpu_ts, gpu_dur, name="volta_sgemm_128x64_nn"):
    return [X("cudaLaunchKernel", "cuda_runtime", ts, 5, correlation=corr),
            gpu(name, "kernel", gpu_ts, gpu_dur, corr)]


def cuda_item(ts, corr):
    """`.item()` of a CUDA tensor as Kineto records it (one device->host copy, then a wait)."""
    return [X("aten::item", "cpu_op", ts, 50), X("aten::_local_scalar_dense", "cpu_op", ts + 1, 48),
            X("cudaMemcpyAsync", "cuda_runtime", ts + 5, 10, correlation=corr),
            X("cudaStreamSynchronize", "cuda_runtime", ts + 20, 25, correlation=corr + 1),
            gpu("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", ts + 30, 2, corr)]


def write(path: Path, events: list[dict]) -> Path:
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def hand_built_pair(tmp_path: Path) -> tuple[Path, Path]:
    a = [X("ProfilerStep#1", "user_annotation", 0, 1000), X("rollout", "user_annotation", 5, 900),
         *launch(10, 1, 100, 100), *launch(20, 2, 200, 100),
         *cuda_item(500, 10), *cuda_item(600, 20), *cuda_item(700, 30)]
    b = [X("ProfilerStep#1", "user_annotation", 0, 800), X("rollout", "user_annotation", 5, 700),
         *launch(10, 1, 100, 50), *launch(20, 2, 150, 50)]
    return write(tmp_path / "a.json", a), write(tmp_path / "b.json", b)


def test_hand_built_pair_headline(tmp_path):
    pa, pb = hand_built_pair(tmp_path)
    c = compare(analyze(load(pa)), analyze(load(pb)))
    # One traced iteration a side: time is not judged, the three .item() syncs are (counts).
    assert c.time_statement.startswith("nothing can be concluded about time: A has 1 counted iteration")
    assert c.worse.empty
    better = {(r.kind, r.item): r for r in c.better.itertuples()}
    assert set(better) == {("sync", "item")}
    item = better[("sync", "item")]
    assert (item.a, item.b, item.delta, item.ratio, item.metric) == (3, 0, -3, 0, "count_per_iteration")
    assert item.impact_us == pytest.approx(150.0)  # three aten::item calls of 50 us each
    assert item.site == "rollout > aten::item"
    spread = c.spread.set_index(["kind", "item"])
    # the .item() copies ran in A only: `only in A`, never better; the rest is not judged
    only_a = {("category", "memcpy"), ("kernel", "Memcpy DtoH (Device -> Pageable)")}
    assert set(spread.index[spread["verdict"] == "only in A"]) == only_a
    assert (spread.drop(index=list(only_a))["verdict"] == "not judged").all()
    assert (spread.at[("iteration", "iteration time"), "a"], spread.at[("iteration", "iteration time"), "b"]) == (1000, 800)
    assert spread.at[("kernel", "volta_sgemm_128x64_nn"), "a"] == 200
    # The tables still pair every figure.
    kernels = c.kernels.set_index("name")
    assert kernels.at["volta_sgemm_128x64_nn", "total_us_delta"] == -100
    assert c.categories.set_index("category").at["gemm", "total_us_b"] == 100
    sites = c.sync_sites.set_index(["kind", "site"])
    assert sites.at[("item", "rollout > aten::item"), "count_delta"] == -3


# -- the command -----------------------------------------------------------------------------------
def test_diff_command_text_json_and_html(tmp_path, capsys):
    pa, pb = hand_built_pair(tmp_path)
    code, out, _ = run_main(["diff", str(pa), str(pb), "--top", "5"], capsys)
    assert code == 0
    assert "What got better" in out and "What got worse: nothing" in out and "volta_sgemm_128x64_nn" in out
    code, out, _ = run_main(["diff", str(pa), str(pb), "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == SCHEMA and doc["headline"]["worse"] == []
    assert {(r["kind"], r["item"]) for r in doc["headline"]["better"]} >= {("sync", "item")}
    page = tmp_path / "diff.html"
    code, _, err = run_main(["diff", str(pa), str(pb), "--html", str(page)], capsys)
    text = page.read_text()
    assert code == 0 and "wrote" in err and text.count('class="plotly-graph-div"') == 4
    assert "<script src=" not in text  # plotly.js is inlined: the page works offline
    code, _, err = run_main(["diff", str(pa), str(pb), "--html", str(page)], capsys)
    assert code == 2 and err.strip().count("\n") == 0 and "--force" in err
    page.write_text("old")
    code, _, _ = run_main(["diff", str(pa), str(pb), "--html", str(page), "--force"], capsys)
    assert code == 0 and "plotly" in page.read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp files left


def test_diff_command_bad_input_is_one_line(tmp_path, capsys):
    code, _, err = run_main(["diff", str(tmp_path / "missing.json"), str(H100)], capsys)
    assert code == 2 and err.strip().count("\n") == 0 and "missing.json" in err


def test_cpu_only_diff_leaves_out_the_gpu_rows(capsys):
    """Two CPU-only traces of our trainer: no gpu_busy_us 0.0 us rows, one line saying why."""
    ours = DATA / "ours"
    code, out, _ = run_main(["diff", str(ours / "cpu_2rank_merged.json.gz"),
                             str(ours / "cpu_full_mode.pt.trace.json.gz")], capsys)
    assert code == 0
    assert "Neither trace has GPU activity" in out
    for metric in ("gpu_busy_us", "gpu_span_us", "gpu_utilization", "kernel_us", "iteration_gpu_us"):
        assert metric not in out
    assert "iteration time" in out and "sync points" in out  # readable names, not keys
    for name in ("GPU busy time", "GPU utilization", "iteration GPU time"):
        assert name not in out
    code, out, _ = run_main(["diff", str(H100), str(ours / "cpu_full_mode.pt.trace.json.gz")], capsys)
    assert code == 0 and "GPU busy time" in out and "Neither trace" not in out
