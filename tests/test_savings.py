"""What fixing a finding would save: estimates recomputed here from the trace's own tables, the
order they set, severity from the share of the iteration, advice that names what the trace shows,
and the coverage rule (no_python_stacks). Fixtures: tests/data (SOURCES.md)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules import BY_ID, SEVERITY_SHARES
from goodhart_prof.analysis.rules.savings import severity_of
from goodhart_prof.trace.load import load

DATA = Path(__file__).parent / "data"
OWL = DATA / "tracelens" / "h100_owlv2_inference.json.gz"
V100 = DATA / "hta" / "v100_ddp_rank1.json.gz"
CPU = DATA / "ours" / "cpu_item_logging_lite.json.gz"


@pytest.fixture(scope="module")
def owl():
    return analyze(load(OWL, progress=False))


@pytest.fixture(scope="module")
def v100():
    return analyze(load(V100, progress=False))


@pytest.fixture(scope="module")
def cpu():
    return analyze(load(CPU, progress=False))


def by_rule(a) -> dict:
    return {f.rule: f for f in a.findings}


def steps(trace):
    ev = trace.events  # the host's ProfilerStep#N (Kineto also marks it on the GPU timeline)
    host = ev["cat"].isin(["user_annotation", "cpu_op"]).to_numpy()
    return ev[host & ev["name"].astype(str).str.match(r"ProfilerStep#\d+$").to_numpy()]


def test_severity_thresholds():
    assert SEVERITY_SHARES["high"].value == 0.10 and SEVERITY_SHARES["medium"].value == 0.02
    assert [severity_of(s) for s in (0.5, 0.10, 0.0999, 0.02, 0.0199, 0.0)] == \
        ["high", "high", "medium", "medium", "low", "low"]


def test_owlv2_idle_time_comes_before_the_pageable_copies(owl):
    found = by_rule(owl)
    step_us = float(steps(owl.trace)["dur"].mean())  # one ProfilerStep: 1.21 s
    # pageable copies: the GPU time of the HtoD pageable memcpys, per iteration
    g = owl.trace.gpu
    pageable = g[g["name"].astype(str) == "Memcpy HtoD (Pageable -> Device)"]
    copy = found["pageable_htod"]
    assert len(pageable) == 25
    assert copy.est_saving_us == pytest.approx(float(pageable["dur"].sum()) / len(steps(owl.trace)), abs=1e-3)
    assert copy.est_saving_us == pytest.approx(1660.111, abs=1e-3)
    assert copy.est_saving_share == pytest.approx(copy.est_saving_us / step_us, rel=1e-3)  # 4 digits
    assert copy.severity == "low"
    # GPU idle: the idle time the DataLoader explains (the top idle cause, within the step: the
    # 128.5 ms of preprocessing before the first kernel included), ~616 ms
    idle = found["low_utilization"]
    top = owl.burstiness[0].idle_causes[0]
    assert "DataLoader" in top["cause"]
    assert idle.est_saving_us == pytest.approx(top["idle_us"], abs=1e-3)
    assert 600_000 < idle.est_saving_us < 644_423 and idle.severity == "high"
    # ordered by saving, largest first: the copies come last
    rules = [f.rule for f in owl.findings]
    assert rules.index("low_utilization") < rules.index("pageable_htod")
    savings = [f.est_saving_us for f in owl.findings if f.est_saving_us is not None]
    assert savings == sorted(savings, reverse=True)


def test_owlv2_softmax_saving_is_its_kernel_time(owl):
    f = by_rule(owl)["dominant_kernel"]
    assert f.evidence["faster_path"] == "sdpa"
    g = owl.trace.gpu
    softmax = g[g["name"].astype(str) == f.evidence["kernel"]]
    assert f.est_saving_us == pytest.approx(float(softmax["dur"].sum()), abs=1e-2)


def _planted_item_us(trace) -> tuple[int, float]:
    """aten::item calls the user's code made in env_step: no cpu op around them, an env_step
    annotation around them (same thread)."""
    ev = trace.events
    name = ev["name"].astype(str).to_numpy()
    ts, end, tid, cat = (ev[c].to_numpy() for c in ("ts", "end", "tid", "cat"))
    items = np.flatnonzero(name == "aten::item")
    ops = np.flatnonzero((cat == "cpu_op") & (name != "aten::item"))
    env = np.flatnonzero(name == "env_step")
    keep = []
    for i in items:
        inside = lambda rows: ((tid[rows] == tid[i]) & (ts[rows] <= ts[i]) & (end[rows] >= end[i])).any()  # noqa: E731
        if inside(env) and not inside(ops):
            keep.append(i)
    return len(keep), float(ev["dur"].to_numpy()[keep].sum())


def test_cpu_item_reads_are_not_high(cpu):
    f = by_rule(cpu)["item_logging"]
    n, us = _planted_item_us(cpu.trace)
    iterations = len(steps(cpu.trace))
    assert (n, iterations) == (24, 3)
    assert f.evidence["count"] == n
    assert f.est_saving_us == pytest.approx(us / iterations, abs=1e-3)
    step_us = float(steps(cpu.trace)["dur"].mean())
    assert f.est_saving_share == pytest.approx(f.est_saving_us / step_us, rel=1e-3)
    assert f.est_saving_share < SEVERITY_SHARES["medium"].value and f.severity == "low"


def test_sgd_step_gets_sgd_advice(v100):
    f = by_rule(v100)["unfused_adam"]
    assert f.evidence["optimizer"] == ["SGD"] and f.evidence["implementation"] == "for-loop"
    assert "torch.optim.SGD(" in f.fix and "foreach=True" in f.fix and "Adam" not in f.fix
    ev = v100.trace.events
    opt = ev[ev["name"].astype(str) == "Optimizer.step#SGD.step"]
    cpu_us = float(opt["dur"].sum())
    assert f.evidence["cpu_us"] == pytest.approx(cpu_us)
    per_step = f.evidence["kernels_per_step"]
    expected = max(cpu_us, f.evidence["gpu_us"]) * (1 - 3 / per_step) / len(steps(v100.trace))
    assert f.est_saving_us == pytest.approx(expected, rel=1e-4)
    assert f.severity == severity_of(f.est_saving_share)


def test_v100_amp_advice_is_fp16_and_saving_half_the_fp32_time(v100):
    f = by_rule(v100)["no_amp"]
    assert "float16" in f.fix and "GradScaler" in f.fix and "bfloat16" not in f.fix
    assert f.est_saving_us == pytest.approx(f.evidence["full_precision_us"] / 2 / len(steps(v100.trace)),
                                            rel=1e-4)


def test_exposed_communication_saving_is_the_transfer_time(v100):
    f = by_rule(v100)["exposed_communication"]
    r = v100.ranks.ranks
    r = r[r["step_us"].notna()]
    transfer = (r["exposed_us"] - np.minimum(r["wait_us"], r["exposed_us"])).mean()
    assert f.est_saving_us == pytest.approx(float(transfer), abs=1e-3)


def test_dlrm_straggler_saving_is_the_others_wait():
    a = analyze(load(DATA / "param" / "dlrm_8rank", progress=False))
    f = by_rule(a)["straggler_rank"]
    it = a.ranks.iterations
    mine = it[it["slowest_rank"] == f.evidence["rank"]]
    assert f.est_saving_us == pytest.approx(float(mine["caused_wait_us"].sum() / len(it)), abs=1e-3)
    # every finding with an estimate comes before every one without, in saving order
    known = [f.est_saving_us is not None for f in a.findings]
    assert known == sorted(known, reverse=True)


def test_no_python_stacks_fires_without_frames_and_sorts_last(cpu):
    f = by_rule(cpu)["no_python_stacks"]
    assert len(cpu.trace.frames) == 0
    assert f.est_saving_us is None and f.est_saving_share is None and "no time" in f.saving_note
    assert "goodhart-prof run --mode full" in f.fix  # our trainer's phases are in the trace
    assert "rollout > env_step > aten::item" in f.evidence["examples"]
    assert f.evidence["findings_with_sites"] == ["item_logging"]
    assert cpu.findings[-1].rule == "no_python_stacks"
    other = by_rule(analyze(load(V100, progress=False)))["no_python_stacks"]
    assert "with_stack=True" in other.fix and "--mode full" not in other.fix


def test_no_python_stacks_is_silent_with_stacks(owl):
    assert len(owl.trace.frames) > 0
    assert "no_python_stacks" not in by_rule(owl)
    assert BY_ID["no_python_stacks"].saving.counts is None


def test_json_findings_carry_the_saving(capsys):
    from goodhart_prof.cli import main
    try:
        main(["analyze", "--json", str(CPU)])
    except SystemExit as exc:
        assert exc.code in (0, None)
    doc = json.loads(capsys.readouterr().out)
    first, last = doc["findings"][0], doc["findings"][-1]
    assert first["rule"] == "item_logging" and first["severity"] == "low"
    assert first["est_saving_us"] > 0 and 0 < first["est_saving_share"] < 0.02
    assert first["saving_basis"] == "iteration"
    assert last["rule"] == "no_python_stacks" and last["est_saving_us"] is None


def test_text_says_what_it_saves(capsys):
    from goodhart_prof.cli import main
    try:
        main(["analyze", str(OWL)])
    except SystemExit as exc:
        assert exc.code in (0, None)
    out = capsys.readouterr().out
    assert "saves ~1.66 ms/iteration (0.14%)" in out
    assert "saves ~616 ms/iteration (50.8%)" in out
    assert out.index("low_utilization") < out.index("pageable_htod:")
