"""Iterations found where the trace does not mark them, and setup told apart (analysis/iterations.py,
analysis/setup.py), on real traces: the ProfilerStep#N events of real traces are stripped and the
iterations inferred from what repeats are compared with the real steps."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis import iterations as iterations_module
from goodhart_prof.analysis.iterations import find_iterations, step_table
from goodhart_prof.analysis.setup import in_setup, setup, setup_bounds
from goodhart_prof.analysis.tree import profiler_steps
from goodhart_prof.trace.load import load
from tests.support.paths import DATA, ROOT

SHARED = ROOT.parent / "shared" / "traces"
STEP = re.compile(r"^ProfilerStep#\d+$")
# An inferred boundary lies within 1% of the mean real step of the real one: the optimizer step
# ends a few dozen us before torch.profiler's step() closes ProfilerStep#N.
TOLERANCE = 0.01


def stripped(src: Path, dest: Path, drop: re.Pattern = STEP) -> Path:
    """The trace without the events whose name `drop` matches (ProfilerStep#N by default)."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not drop.match(str(e.get("name", "")))]
    dest.write_text(json.dumps(doc))
    return dest


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """(real, stripped) traces, each loaded once."""
    tmp = tmp_path_factory.mktemp("stripped")
    out = {}
    for key, rel in (("v100", "hta/v100_ddp_rank1.json.gz"),
                     ("resnet", "kineto/resnet50_v100_2021.pt.trace.json.gz"),
                     ("ppo", "ours/cpu_full_mode.pt.trace.json.gz")):
        src = DATA / rel
        out[key] = (load(src, progress=False), load(stripped(src, tmp / f"{key}.json"), progress=False))
    return out


def real_steps(trace) -> np.ndarray:
    """(ts, end) of each real ProfilerStep#N of rank-0-or-only, in step order."""
    s = profiler_steps(trace.events).groupby("step").agg(ts=("ts", "min"), end=("end", "max"))
    return s[["ts", "end"]].to_numpy(float)


@pytest.mark.parametrize("key, marker", [("v100", "Optimizer.step#SGD.step"),
                                         ("resnet", "Optimizer.step#SGD.step")])
def test_inferred_from_the_optimizer_step_match_the_real_steps(pairs, key, marker):
    real, bare = pairs[key]
    assert find_iterations(real).how == "marked"
    it = find_iterations(bare)
    assert (it.how, it.marker, it.boundary) == ("inferred", marker, "end")
    steps = real_steps(real)
    # n optimizer steps make n - 1 iterations: the first step's own work is setup
    assert it.count == len(steps) - 1 == len(it.table)
    got = it.table[["ts", "end"]].to_numpy(float)
    tol = TOLERANCE * float((steps[:, 1] - steps[:, 0]).mean())
    # inferred iteration k runs from the end of optimizer step k-1 to the end of step k: the
    # real steps 2.. (each real step ends with its optimizer step)
    assert np.abs(got[:, 0] - steps[:-1, 1]).max() < tol
    assert np.abs(got[:, 1] - steps[1:, 1]).max() < tol
    assert it.describe().startswith(f"{len(steps) - 1} iteration(s) inferred from {marker}")


def test_dataloader_next_when_no_optimizer_step(tmp_path, pairs):
    """Without ProfilerStep#N and Optimizer.step#, DataLoader.__next__ opens each iteration."""
    real = pairs["resnet"][0]
    bare = load(stripped(DATA / "kineto/resnet50_v100_2021.pt.trace.json.gz", tmp_path / "r.json",
                         re.compile(r"^ProfilerStep#\d+$|^Optimizer\.")), progress=False)
    it = find_iterations(bare)
    assert (it.how, it.marker, it.boundary) == (
        "inferred", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "start")
    steps = real_steps(real)
    got = it.table[["ts", "end"]].to_numpy(float)
    assert len(got) == len(steps) - 1
    tol = TOLERANCE * float((steps[:, 1] - steps[:, 0]).mean())
    # each real step opens by fetching its batch: the boundaries are the real steps' starts
    assert np.abs(got[:, 0] - steps[:-1, 0]).max() < tol
    assert np.abs(got[:, 1] - steps[1:, 0]).max() < tol


def test_several_optimizer_steps_per_iteration_are_taken_as_iterations(pairs):
    """A PPO loop with 2 minibatch updates per iteration: without ProfilerStep#N the optimizer
    steps are the iterations found (a stated limit: DESIGN.md), their ends the boundaries."""
    real, bare = pairs["ppo"]
    it = find_iterations(bare)
    assert (it.how, it.marker) == ("inferred", "Optimizer.step#Adam.step")
    ev = real.events
    opt = ev[(ev["name"] == "Optimizer.step#Adam.step") & (ev["cat"] == "user_annotation")]
    ends = np.sort(opt["end"].to_numpy(float))
    assert len(ends) == 4 and len(step_table(real)) == 2
    assert it.table["step"].tolist() == [1, 2, 3]
    np.testing.assert_allclose(it.table["ts"].to_numpy(float), ends[:-1])
    np.testing.assert_allclose(it.table["end"].to_numpy(float), ends[1:])


def test_marked_traces_keep_their_profiler_steps(pairs):
    for real, _ in pairs.values():
        it = find_iterations(real)
        assert it.how == "marked" and it.marker == "ProfilerStep#N"
        assert step_table(real).equals(profiler_steps(real.events))
        assert it.describe() == f"{it.count} iteration(s) (ProfilerStep#N)"


def test_nothing_repeats_no_iterations():
    trace = load(DATA / "tracelens" / "vllm_decode_full_graph.json.gz", progress=False)
    it = find_iterations(trace)
    assert it.how == "none" and it.count == 0 and step_table(trace).empty
    assert it.describe().startswith("no iterations found")


def test_nested_annotations_are_no_loop():
    """vLLM's `## Call CompiledFxGraph ##` runs 23 times, once per layer inside one
    capture_8192_PIECEWISE: parts of one call, not iterations."""
    path = SHARED / "tracelens" / "vllm_piecewise_graph_capture.json.gz"
    if not path.exists():
        pytest.skip("shared/traces not here")
    trace = load(path, progress=False)
    ev = trace.events
    calls = ev[ev["name"].astype(str).str.startswith("## Call CompiledFxGraph fb3en3")]
    assert len(calls) == 23
    assert find_iterations(trace).how == "none"


def test_inferred_iterations_feed_the_per_iteration_figures(pairs):
    """Phases, the savings basis and the rules' iteration count follow the inferred table."""
    bare = pairs["resnet"][1]
    a = analyze(bare)
    it = find_iterations(bare)
    rows = a.phases[a.phases["kind"] == "iteration"]
    assert rows["name"].tolist() == [f"iteration#{k}" for k in range(1, it.count + 1)]
    np.testing.assert_allclose(rows["cpu_us"].to_numpy(float), it.table["dur"].to_numpy(float))
    assert all(f.saving_basis == "iteration" for f in a.findings)
    assert not any(n.reason.startswith("no iterations") for n in a.not_judged)
    # what ran before the first iteration is setup: the first step's work, once
    b = setup_bounds(bare)
    assert b["bound"].tolist() == ["first iteration"]
    assert float(b["end"].iloc[0]) == float(it.table["ts"].min())


@pytest.fixture(scope="module")
def alexnet():
    """An A100 AlexNet-style run: the model built on the host and uploaded before any kernel
    (16 pageable HtoD copies, 244 MB), no ProfilerStep#N and nothing that repeats."""
    return analyze(load(DATA / "hta" / "critical_path_simple_add.json.gz", progress=False))


def test_model_upload_is_setup_not_per_iteration(alexnet):
    trace = alexnet.trace
    assert find_iterations(trace).how == "none"
    s = setup(trace)
    (row,) = s.ranks.to_dict("records")
    assert row["bound"] == "first kernel launch"
    assert (row["htod_copies"], row["htod_bytes"]) == (16, 244403360.0)
    assert row["htod_gpu_us"] == pytest.approx(39080.0)
    assert row["dur_us"] == pytest.approx(25205881.0)
    assert s.ops[0]["name"] == "aten::to" and s.ops[0]["count"] == 16
    # the 16 pageable copies are sync points, all in setup: pageable_htod does not count them
    pg = alexnet.sync_points[alexnet.sync_points["kind"] == "memcpy_htod_pageable"]
    assert len(pg) == 16 and in_setup(trace, pg["rank"], pg["ts"]).all()
    assert "pageable_htod" not in {f.rule for f in alexnet.findings}
    # without iterations, no per-iteration rate: the rules that need them say so
    reasons = {n.rule: n.reason for n in alexnet.not_judged}
    assert reasons["cpu_alloc"].startswith("no iterations: no ProfilerStep#N")


def test_reports_say_how_iterations_were_found_and_show_setup_apart(alexnet, pairs):
    import io

    from rich.console import Console

    from goodhart_prof.analysis.rules.base import Context
    from goodhart_prof.report.html.page import render_html
    from goodhart_prof.report.json_report import to_document
    from goodhart_prof.report.text.report import render
    out = io.StringIO()
    render(alexnet, Console(file=out, width=300, color_system=None), 5)
    text = out.getvalue()
    assert "Iterations: no iterations found" in text
    assert ("Setup (before the first kernel launch; runs once, left out of per-iteration figures): "
            "25.206 s on rank 0 · 16 host-to-device copies (233.1 MiB, 39.080 ms on the GPU)") in text
    doc = to_document(alexnet)
    assert doc["iterations"]["how"] == "none" and doc["iterations"]["count"] == 0
    (rank,) = doc["setup"]["ranks"]
    assert (rank["bound"], rank["htod_copies"], rank["htod_bytes"]) == ("first kernel launch", 16, 244403360.0)
    page = render_html(alexnet)
    assert "<th>iterations</th><td>no iterations found" in page and "<th>setup</th>" in page
    # the rules' sync points leave setup out: the upload's 16 pageable copies are not there
    assert not (Context(alexnet).points["kind"] == "memcpy_htod_pageable").any()
    # an inferred trace says which marker
    bare = analyze(pairs["v100"][1])
    assert to_document(bare)["iterations"] == {
        "how": "inferred", "marker": "Optimizer.step#SGD.step", "boundary": "end", "count": 4,
        "text": find_iterations(bare.trace).describe()}


def test_an_unmarked_loop_recorded_without_step():
    """A supervised loop recorded with a bare `torch.profiler.profile()` (no schedule, no
    prof.step(): tests/data/ours/unmarked/unmarked_loop.py): 6 SGD steps make 5 iterations, each
    holding one batch fetch and one optimizer step; the data, the model and a warm-up forward
    made before the loop are setup."""
    trace = load(DATA / "ours" / "unmarked" / "unmarked_loop.json.gz", progress=False)
    it = find_iterations(trace)
    assert (it.how, it.marker, it.count) == ("inferred", "Optimizer.step#SGD.step", 5)
    ev = trace.events
    fetch = np.sort(ev.loc[ev["name"] == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "ts"]
                    .to_numpy(float))
    opt = np.sort(ev.loc[ev["name"] == "Optimizer.step#SGD.step", "ts"].to_numpy(float))
    assert len(fetch) == 7 and len(opt) == 6  # the 7th fetch ends the loop (StopIteration)
    for ts, end in it.table[["ts", "end"]].to_numpy(float):
        assert ((fetch >= ts) & (fetch < end)).sum() == 1 and ((opt >= ts) & (opt < end)).sum() == 1
    s = setup(trace)
    assert s.ranks["end"].tolist() == [float(it.table["ts"].min())]
    assert {"aten::randn", "aten::linear"} <= {o["name"] for o in s.ops}
    from goodhart_prof.report.html.page import render_html
    page = render_html(analyze(trace))  # the phases say what the iterations are
    assert "Traced iterations (inferred from Optimizer.step#SGD.step, whole rank)" in page


def test_backward_passes_when_no_marker_repeats(tmp_path, pairs):
    """V100 DDP without ProfilerStep#N and Optimizer.step#: the autograd engine's runs (its
    backward thread) are the passes, one ending inside each real step from the second on."""
    real = pairs["v100"][0]
    bare = load(stripped(DATA / "hta/v100_ddp_rank1.json.gz", tmp_path / "b.json",
                         re.compile(r"^ProfilerStep#\d+$|^Optimizer\.")), progress=False)
    it = find_iterations(bare)
    assert (it.how, it.marker, it.boundary) == ("inferred", "the backward pass (autograd::engine)", "end")
    steps = real_steps(real)
    assert it.count == len(steps) - 1 == 4
    bounds = np.r_[it.table["ts"].to_numpy(float)[:1], it.table["end"].to_numpy(float)]
    inside = (bounds[:, None] >= steps[None, :, 0]) & (bounds[:, None] <= steps[None, :, 1])
    assert inside.sum(axis=1).tolist() == [1] * 5 and inside.argmax(axis=1).tolist() == [0, 1, 2, 3, 4]


def test_iterations_equals_the_last_step_starting_by_each_time(monkeypatch):
    """iterations.iterations: N of the step of the same rank that started last at or before ts (ties:
    the later table row) when it still holds ts, else -1; ranks without steps, times before
    the first step and between steps get -1."""
    rng = np.random.default_rng(4)
    rank = np.repeat([0, 2, 5], [40, 30, 1])
    ts = np.round(rng.uniform(0, 1000, len(rank)), 0)
    ts[5] = ts[6]  # a tie of starts on rank 0
    steps = {"rank": rank, "ts": ts, "end": ts + np.round(rng.uniform(1, 60, len(rank)), 0),
             "step": np.arange(len(rank)) * 10}
    monkeypatch.setattr(iterations_module, "step_table", lambda trace: pd.DataFrame(steps))
    q_rank = rng.choice([0, 1, 2, 5], 3000)
    q_ts = np.r_[np.round(rng.uniform(-10, 1100, 2996), 0), ts[5], ts[5], ts[40], steps["end"][40]]
    q_rank[-4:] = [0, 0, 2, 2]
    want = []
    for r, t in zip(q_rank.tolist(), q_ts.tolist()):
        mine = [i for i in range(len(rank)) if rank[i] == r and ts[i] <= t]
        best = max(mine, key=lambda i: (ts[i], i)) if mine else None
        want.append(int(steps["step"][best]) if best is not None and t <= steps["end"][best] else -1)
    got = iterations_module.iterations(None, q_rank, q_ts)
    np.testing.assert_array_equal(got, want)
    assert (got >= 0).sum() > 200 and (got[q_rank == 1] == -1).all() and got[-4] == 60
