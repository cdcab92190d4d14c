"""What fixing a finding would save: estimates checked against figures computed here from the
raw trace JSON by plain passes (tests/support/helpers.py's idle split, kernels by name and correlation,
NCCL kernels matched across ranks by hand), never from the finding's own evidence; the
order they set, severity from the share of the iteration, advice that names what the trace shows,
and the coverage rule (no_python_stacks). Fixtures: tests/data (SOURCES.md)."""
from __future__ import annotations

import json
import re
import statistics

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules import BY_ID, SEVERITY_SHARES
from goodhart_prof.analysis.rules.savings import severity_of
from goodhart_prof.trace.load import load

from tests.support.helpers import GPU_CATS, covered, idle_split, merged, read_trace
from tests.support.paths import DATA

OWL = DATA / "tracelens" / "h100_owlv2_inference.json.gz"
V100 = DATA / "hta" / "v100_ddp_rank1.json.gz"
CPU = DATA / "ours" / "cpu_item_logging_lite.json.gz"
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


@pytest.fixture(scope="module")
def owl():
    return analyze(load(OWL, progress=False))


@pytest.fixture(scope="module")
def owl_raw() -> dict:
    """The OWLv2 figures the savings are checked against, from a plain pass over the raw JSON."""
    events = read_trace(OWL)["traceEvents"]
    steps = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
             if e.get("cat") == "user_annotation" and str(e["name"]).startswith("ProfilerStep#")]
    split = idle_split(events, steps)
    pageable = [float(e["dur"]) for e in events
                if e.get("cat") == "gpu_memcpy" and e["name"] == "Memcpy HtoD (Pageable -> Device)"]
    return {"steps": len(steps), "step_us": sum(b - a for a, b in steps) / len(steps),
            "dataloader_us": split["causes"][DATALOADER], "pageable_us": sum(pageable),
            "pageable_n": len(pageable)}


@pytest.fixture(scope="module")
def v100_raw() -> dict:
    """The V100 DDP rank's figures the savings are checked against, from the raw JSON: its steps,
    the SGD step annotations and the kernels launched inside them (launch call on the annotation's
    thread within its span, kernel by correlation id), the fp32 GEMM kernels, and per step the
    NCCL kernels' time that no other GPU activity overlaps."""
    events = [e for e in read_trace(V100)["traceEvents"] if e.get("ph") == "X"]
    steps = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
             if e.get("cat") == "user_annotation" and str(e["name"]).startswith("ProfilerStep#")]
    opt = [e for e in events if e["name"] == "Optimizer.step#SGD.step" and e.get("cat") == "user_annotation"]
    inside = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime"
              and any((e["pid"], e["tid"]) == (o["pid"], o["tid"]) and o["ts"] <= e["ts"] <= o["ts"] + o["dur"]
                      for o in opt)}
    opt_kernels = [float(e["dur"]) for e in events
                   if e.get("cat") == "kernel" and e["args"].get("correlation") in inside]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    # cuBLAS's single-precision GEMMs (volta_sgemm_*, magma_sgemmEx<float>) with their split-K
    # reductions and cublasLt epilogues (float in, float out), read off the kernel names by hand
    fp32_gemm = [float(e["dur"]) for e in kernels
                 if re.match(r"volta_sgemm_|void magma_sgemmEx_kernel<float|void splitKreduce_kernel<float"
                             r"|void epilogue::impl::globalKernel<float", e["name"])]
    nccl = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in kernels if e["name"].startswith("ncclKernel_")]
    other = merged((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
                   if e.get("cat") in GPU_CATS and not e["name"].startswith("ncclKernel_"))
    exposed = []
    for a, b in steps:
        comm = merged((max(s, a), min(e, b)) for s, e in nccl if s < b and e > a)
        exposed.append(sum(e - s - covered(other, s, e) for s, e in comm))
    return {"steps": len(steps), "step_us": sum(b - a for a, b in steps) / len(steps),
            "opt_steps": len(opt), "opt_cpu_us": sum(float(o["dur"]) for o in opt),
            "opt_kernels": len(opt_kernels), "opt_gpu_us": sum(opt_kernels),
            "fp32_gemm_us": sum(fp32_gemm), "exposed_us": exposed}


@pytest.fixture(scope="module")
def v100():
    return analyze(load(V100, progress=False))


@pytest.fixture(scope="module")
def cpu():
    return analyze(load(CPU, progress=False))


def by_rule(a) -> dict:
    return {f.rule: f for f in a.findings}


def test_severity_thresholds():
    assert SEVERITY_SHARES["high"].value == 0.10 and SEVERITY_SHARES["medium"].value == 0.02
    assert [severity_of(s) for s in (0.5, 0.10, 0.0999, 0.02, 0.0199, 0.0)] == \
        ["high", "high", "medium", "medium", "low", "low"]


def test_owlv2_idle_time_comes_before_the_pageable_copies(owl, owl_raw):
    found = by_rule(owl)
    step_us = owl_raw["step_us"]  # one ProfilerStep: 1.21 s
    # pageable copies: the GPU time of the HtoD pageable memcpys, per iteration
    copy = found["pageable_htod"]
    assert owl_raw["pageable_n"] == 25
    assert copy.est_saving_us == pytest.approx(owl_raw["pageable_us"] / owl_raw["steps"], abs=1e-3)
    assert copy.est_saving_us == pytest.approx(1660.111, abs=1e-3)
    assert copy.est_saving_share == pytest.approx(copy.est_saving_us / step_us, rel=1e-3)  # 4 digits
    assert copy.severity == "low"
    # GPU idle: the idle time the DataLoader explains, read off the raw JSON by tests/support/helpers.py's
    # own pass (GPU activities merged by hand, gaps and the step's lead-in cut at the launching
    # thread's host events): within the step, the 128.5 ms of preprocessing before the first
    # kernel included, ~616 ms in the one step
    idle = found["low_utilization"]
    assert idle.est_saving_us == pytest.approx(owl_raw["dataloader_us"] / owl_raw["steps"], abs=1e-3)
    assert 600_000 < idle.est_saving_us < 650_000 and idle.severity == "high"
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


def _planted_item_us() -> tuple[int, float]:
    """From the raw JSON: the aten::item calls the user's code made in env_step (an env_step
    annotation around them on the same thread, no other cpu op around them), and their time."""
    events = [e for e in read_trace(CPU)["traceEvents"] if e.get("ph") == "X"]

    def around(e, outer) -> bool:
        return ((outer["pid"], outer["tid"]) == (e["pid"], e["tid"]) and outer is not e
                and outer["ts"] <= e["ts"] and e["ts"] + e["dur"] <= outer["ts"] + outer["dur"])

    env = [e for e in events if e["name"] == "env_step"]
    ops = [e for e in events if e.get("cat") == "cpu_op" and e["name"] != "aten::item"]
    planted = [e for e in events if e["name"] == "aten::item"
               and any(around(e, o) for o in env) and not any(around(e, o) for o in ops)]
    return len(planted), sum(float(e["dur"]) for e in planted)


def test_cpu_item_reads_are_not_high(cpu):
    f = by_rule(cpu)["item_logging"]
    n, us = _planted_item_us()
    step_durs = [float(e["dur"]) for e in read_trace(CPU)["traceEvents"]
                 if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("ProfilerStep#")]
    iterations = len(step_durs)
    assert (n, iterations) == (24, 3)
    assert f.evidence["count"] == n
    assert f.est_saving_us == pytest.approx(us / iterations, abs=1e-3)
    step_us = sum(step_durs) / iterations
    assert f.est_saving_share == pytest.approx(f.est_saving_us / step_us, rel=1e-3)
    assert f.est_saving_share < SEVERITY_SHARES["medium"].value and f.severity == "low"


def test_sgd_step_gets_sgd_advice(v100, v100_raw):
    f = by_rule(v100)["unfused_adam"]
    assert f.evidence["optimizer"] == ["SGD"] and f.evidence["implementation"] == "for-loop"
    assert "torch.optim.SGD(" in f.fix and "foreach=True" in f.fix and "Adam" not in f.fix
    # the raw JSON: 5 SGD steps launching 404 kernels each (one per parameter tensor and stage)
    assert (v100_raw["opt_steps"], v100_raw["opt_kernels"], v100_raw["steps"]) == (5, 2020, 5)
    assert f.evidence["cpu_us"] == pytest.approx(v100_raw["opt_cpu_us"])
    assert f.evidence["gpu_us"] == pytest.approx(v100_raw["opt_gpu_us"])
    # the saving (the rule's declared estimate, rules/compilation.py): the step's time, host or GPU
    # whichever is longer, times 1 - 3 / its kernels per step, per iteration
    longer = max(v100_raw["opt_cpu_us"], v100_raw["opt_gpu_us"])
    expected = longer * (1 - 3 / (v100_raw["opt_kernels"] / v100_raw["opt_steps"])) / v100_raw["steps"]
    assert f.est_saving_us == pytest.approx(expected, abs=1e-3)
    assert f.severity == severity_of(expected / v100_raw["step_us"])


def test_v100_amp_advice_is_fp16_and_saving_half_the_fp32_time(v100, v100_raw):
    f = by_rule(v100)["no_amp"]
    assert "float16" in f.fix and "GradScaler" in f.fix and "bfloat16" not in f.fix
    # half the fp32 GEMM kernel time (414 ms in the trace's 5 steps) per iteration
    assert v100_raw["fp32_gemm_us"] == pytest.approx(414005.0)
    assert f.est_saving_us == pytest.approx(v100_raw["fp32_gemm_us"] / 2 / v100_raw["steps"], abs=1e-3)


def test_exposed_communication_saving_is_the_transfer_time(v100, v100_raw):
    f = by_rule(v100)["exposed_communication"]
    # one rank traced: no arrivals to compare, so no waiting is taken off; the saving is the mean
    # per step of the NCCL time no other GPU activity overlaps (here none does: 59.5-119 ms a step)
    assert min(v100_raw["exposed_us"]) > 59_000
    mean = sum(v100_raw["exposed_us"]) / len(v100_raw["exposed_us"])
    assert f.est_saving_us == pytest.approx(mean, abs=1e-3)


def dlrm_others_wait() -> dict[int, float]:
    """Per rank of the 8-rank DLRM trace (one ProfilerStep each), from the raw JSON: the waiting it
    cost the others at the collectives it reached last. The j-th NCCL kernel of a kind
    (SendRecv, AllReduce) on each rank is one collective (NCCL runs a group's collectives in the
    same order on every rank); a rank arrives at its kernel's start, the last arrival sets the
    wait, and each collective the last rank reached costs the others their mean wait."""
    starts, ends = {}, {}
    for rank in range(8):
        events = read_trace(DATA / "param" / "dlrm_8rank" / f"worker{rank}_step_12.pt.trace.json.gz")["traceEvents"]
        for e in sorted((e for e in events if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_")),
                        key=lambda e: e["ts"]):
            kind = e["name"].split("_")[1]
            seq = sum(1 for k in starts if k[0] == kind and k[1] == rank)
            starts[kind, rank, seq], ends[kind, rank, seq] = e["ts"], e["ts"] + e["dur"]
    collectives = sorted({(kind, seq) for kind, _, seq in starts})
    # the ranks' clocks agree: every rank's median end is within 20 us of the collectives' median
    # ends (below that no offset is removed), so starts compare as recorded
    for rank in range(8):
        off = [ends[k, rank, q] - statistics.median(ends[k, r, q] for r in range(8)) for k, q in collectives]
        assert abs(statistics.median(off)) < 20
    caused = dict.fromkeys(range(8), 0.0)
    for kind, seq in collectives:
        arrived = {r: starts[kind, r, seq] for r in range(8)}
        last = max(arrived, key=lambda r: (arrived[r], -r))
        caused[last] += sum(arrived[last] - t for r, t in arrived.items() if r != last) / 7
    return caused


def test_dlrm_straggler_saving_is_the_others_wait():
    a = analyze(load(DATA / "param" / "dlrm_8rank", progress=False))
    f = by_rule(a)["straggler_rank"]
    caused = dlrm_others_wait()
    worst = max(caused, key=caused.get)
    assert (f.evidence["rank"], len(caused)) == (worst, 8) and worst == 7
    assert f.est_saving_us == pytest.approx(caused[worst], abs=1e-3)  # one iteration traced
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


def rounds_to(printed: str, value: float) -> bool:
    """Whether `printed` (a decimal as a report prints it) is `value` rounded to its digits."""
    decimals = len(printed.partition(".")[2])
    return abs(float(printed) - value) <= 0.5 * 10 ** -decimals + 1e-9


def test_text_says_what_it_saves(capsys, owl_raw):
    from goodhart_prof.cli import main
    try:
        main(["analyze", str(OWL)])
    except SystemExit as exc:
        assert exc.code in (0, None)
    out = capsys.readouterr().out
    # the printed savings against the raw JSON's figures, each within half a unit of its last
    # printed digit (the only difference rounding for print can make)
    for rule, us in (("pageable_htod", owl_raw["pageable_us"]), ("low_utilization", owl_raw["dataloader_us"])):
        m = re.compile(r"saves ~([\d.]+) ms/iteration \(([\d.]+)%\)").search(out, out.index(f"{rule}:"))
        expected_ms = us / owl_raw["steps"] / 1000
        assert rounds_to(m[1], expected_ms), (rule, m[0], expected_ms)
        assert rounds_to(m[2], 100 * expected_ms * 1000 / owl_raw["step_us"]), (rule, m[0])
    assert "saves ~1.66 ms/iteration (0.14%)" in out and "saves ~616 ms/iteration (50.8%)" in out
    assert out.index("low_utilization") < out.index("pageable_htod:")
