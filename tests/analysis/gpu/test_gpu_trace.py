"""Our own trainer on an NVIDIA H200 (torch 2.11, compiled, bf16 autocast): the zoo's clean run
traced in full mode (iterations 3-5) and in lite mode (iterations 3-4), tests/data/gpu/README.md.
Event counts, the kernel category and library tables, GPU busy/idle, and the findings of a run
that plants no slowdown: only the real ones fire (cuDNN's layout transposes, the host launching
compiled code kernel by kernel on the full trace, no Python stacks on the lite one)."""
from __future__ import annotations

import json

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.gpu.device_time import gpu_time
from goodhart_prof.analysis.gpu.kernels import (category_table, kernel_table, layout_transposes,
                                            library_table)
from goodhart_prof.analysis.rules import ZOO_RULES
from goodhart_prof.trace.load import load
from tests.support.paths import DATA as FIXTURES

DATA = FIXTURES / "gpu" / "h200_2026-11-26"
TRANSPOSE = ("void transposeBlock_kernel<__nv_bfloat16, __nv_bfloat16, float, 32u, 8u>(int, int, "
             "int, float, __nv_bfloat16 const*, __nv_bfloat16*)")

# Per mode, counted in the raw file (events with `ph: X` by `cat`; the loader keeps all but the
# python_function frames, which it holds apart): kernels, memsets, memcpys, cpu ops, runtime and
# driver calls, annotations.
EVENTS = {
    "full": {"events": 52_613, "kernel": 12_319, "gpu_memset": 653, "gpu_memcpy": 4,
             "cpu_op": 21_285, "cuda_runtime": 8_923, "cuda_driver": 7_539,
             "user_annotation": 1_275, "gpu_user_annotation": 591, "cuda_sync": 20},
    "lite": {"events": 35_472, "kernel": 8_484, "gpu_memset": 458, "gpu_memcpy": 3,
             "cpu_op": 14_514, "cuda_runtime": 5_952, "cuda_driver": 5_026,
             "user_annotation": 526, "gpu_user_annotation": 330, "cuda_sync": 0},
}

# category -> (main library, count, total us). No `other`; no `norm` (the trainer has no
# normalization layer: grad clipping's foreach norm is a reduction); `copy` is cuDNN's layout
# transposes around the convolutions (tensorTransformGeneric among them, not a sort); `sort` is
# top-k and randperm (its radix sort on cub, its tie shuffle and top-k's on aten).
CATEGORIES = {
    "full": {"conv": ("cudnn", 843, 268_546.241), "copy": ("cudnn", 774, 192_056.048),
             "elementwise": ("triton", 7_022, 116_910.607), "gemm": ("cublas", 1_257, 75_312.049),
             "reduction": ("triton", 1_574, 31_279.077),
             "scatter_gather": ("aten", 339, 5_699.483), "sort": ("aten", 510, 5_673.549),
             "memset": ("runtime", 653, 1_911.085), "memcpy": ("runtime", 4, 5.952)},
    "lite": {"conv": ("cudnn", 585, 191_942.074), "copy": ("cudnn", 554, 137_699.846),
             "elementwise": ("triton", 4_779, 82_503.504), "gemm": ("cublas", 870, 53_412.577),
             "reduction": ("triton", 1_108, 22_329.999),
             "scatter_gather": ("aten", 242, 4_069.331), "sort": ("aten", 346, 3_836.221),
             "memset": ("runtime", 458, 1_369.464), "memcpy": ("runtime", 3, 4.512)},
}
# library -> (count, total us)
LIBRARIES = {
    "full": {"cudnn": (1_522, 460_235.284), "triton": (7_147, 142_591.596),
             "cublas": (838, 60_123.045), "aten": (2_281, 16_174.705),
             "cutlass": (419, 15_189.004), "runtime": (657, 1_917.037), "cub": (112, 1_163.42)},
    "lite": {"cudnn": (1_072, 329_392.804), "triton": (4_876, 100_843.283),
             "cublas": (580, 42_646.907), "aten": (1_586, 11_314.52),
             "cutlass": (290, 10_765.67), "runtime": (461, 1_373.976), "cub": (80, 830.368)},
}
# transposeBlock_kernel: (rows, of which launched before tracing began, i.e. with no op link)
TRANSPOSES = {"full": (396, 60), "lite": (284, 60)}
FIRES = {"full": {"low_utilization", "dominant_kernel"},
         "lite": {"dominant_kernel", "no_python_stacks"}}


@pytest.fixture(scope="module", params=["full", "lite"])
def run(request):
    mode = request.param
    folder = DATA / mode / "clean"
    trace = load(folder / "rank-0.pt.trace.json.gz", progress=False)
    reference = json.loads((folder / "analysis.json").read_text())
    return mode, trace, analyze(trace), reference


def test_event_counts(run):
    mode, trace, _, reference = run
    want = EVENTS[mode]
    assert len(trace.events) == want["events"] == reference["trace"]["events"]
    cats = trace.events["cat"].value_counts()
    for cat, n in want.items():
        if cat != "events":
            assert cats.get(cat, 0) == n, cat
    assert len(trace.gpu) == want["kernel"] + want["gpu_memset"] + want["gpu_memcpy"]
    assert trace.ranks == [0] and len(trace.devices) == 1


def test_category_table(run):
    mode, trace, _, _ = run
    ct = category_table(trace)
    got = {r.category: (r.library, int(r.count), round(float(r.total_us), 3))
           for r in ct.itertuples()}
    assert got == CATEGORIES[mode]
    assert "other" not in got  # our own trainer leaves nothing uncategorised
    assert ct["count"].sum() == len(trace.gpu)
    # the categories share out all GPU activity time, exactly (fsum per category)
    assert ct["total_us"].sum() == pytest.approx(float(trace.gpu["dur"].sum()), abs=1e-6)
    assert ct["pct"].sum() == pytest.approx(100)


def test_library_table(run):
    mode, trace, _, _ = run
    lt = library_table(trace)
    assert {r.library: (int(r.count), round(float(r.total_us), 3)) for r in lt.itertuples()} \
        == LIBRARIES[mode]
    assert lt["count"].sum() == len(trace.gpu)
    assert lt["total_us"].sum() == pytest.approx(float(trace.gpu["dur"].sum()), abs=1e-6)


def test_one_kernel_is_one_row_with_one_library(run):
    mode, trace, _, reference = run
    kt = kernel_table(trace)
    assert kt["name"].is_unique and len(kt) == 125
    rows, unlinked = TRANSPOSES[mode]
    row = kt[kt["name"] == TRANSPOSE].iloc[0]
    assert (row["category"], row["library"], row["count"]) == ("copy", "cudnn", rows)
    # The GPU machine's report (commit 7c38a10) split it: aten where an op launched it, other
    # where the launch happened before tracing began.
    old = [k for k in reference["kernels"] if k["name"] == TRANSPOSE]
    assert sorted((k["library"], k["count"]) for k in old) == sorted(
        [("aten", rows - unlinked), ("other", unlinked)])
    # tensorTransformGeneric was a sort (`tenSORTransform`); it is a layout copy of cuDNN's
    tt = kt[kt["name"].str.startswith("void tensorTransformGeneric<")].iloc[0]
    assert (tt["category"], tt["library"]) == ("copy", "cudnn")
    assert [k["category"] for k in reference["kernels"]
            if k["name"].startswith("void tensorTransformGeneric<")] == ["sort"]


def test_busy_and_idle_are_the_loaders_figures(run):
    mode, trace, _, reference = run
    g = gpu_time(trace).iloc[0]
    ref = reference["gpu"]["rank0/gpu0"]
    for key in ("span_us", "busy_us", "idle_us", "kernel_us", "step_span_us", "step_busy_us",
                "step_idle_us"):
        assert float(g[key]) == pytest.approx(ref[key], abs=1e-6), key
    # busy + idle is the span (over the steps too); busy is at most the summed durations, which
    # count overlapping activity twice; kernel time is the summed durations less memsets and
    # memcpys, so the kernel categories add up to it
    assert g["busy_us"] + g["idle_us"] == pytest.approx(g["span_us"], abs=1e-6)
    assert g["step_busy_us"] + g["step_idle_us"] == pytest.approx(g["step_span_us"], abs=1e-6)
    assert g["busy_us"] <= float(trace.gpu["dur"].sum())
    ct = category_table(trace).set_index("category")
    kernels = ct.drop(index=["memset", "memcpy"])["total_us"].sum()
    assert kernels == pytest.approx(float(g["kernel_us"]), abs=1e-6)
    assert g["utilization"] == pytest.approx(g["busy_us"] / g["span_us"])
    assert 0.66 < g["step_utilization"] < 0.79


def test_dominant_kernel_names_the_layout_cause(run):
    mode, trace, analysis, _ = run
    f = next(f for f in analysis.findings if f.rule == "dominant_kernel")
    ev = f.evidence
    rows, _ = TRANSPOSES[mode]
    assert (ev["kernel"], ev["library"], ev["category"], ev["count"]) == (TRANSPOSE, "cudnn",
                                                                          "copy", rows)
    assert [o["op"] for o in ev["launching_ops"]] == ["aten::convolution_backward",
                                                      "aten::cudnn_convolution"]
    assert ev["faster_path"] == "channels_last" and f.severity == "medium"
    # the share of every layout transpose (transposeBlock, tensorTransformGeneric, nchwToNhwc,
    # nhwcToNchw: all launched by convolution ops or before tracing began) in all GPU time
    kt = kernel_table(trace)
    mine = kt[layout_transposes(kt["name"])]
    assert len(mine) == 4 and set(mine["library"]) == {"cudnn"}
    share = mine["total_us"].sum() / kt["total_us"].sum()
    assert ev["layout_transposes"] == {"share": round(share, 4), "count": int(mine["count"].sum()),
                                       "kernels": 4}
    assert 0.27 < share < 0.28
    assert f"these layout transposes take {share:.1%} of GPU time" in f.fix
    assert "cuDNN converts the NCHW tensors to NHWC and back around each convolution" in f.fix
    assert "model.to(memory_format=torch.channels_last)" in f.fix
    assert "x.contiguous(memory_format=torch.channels_last)" in f.fix
    assert f.est_saving_us is None  # measured time, no claimed saving


def test_the_clean_run_fires_only_what_is_there(run):
    mode, _, analysis, _ = run
    assert {f.rule for f in analysis.findings} == FIRES[mode]
    assert not set(ZOO_RULES) & {f.rule for f in analysis.findings}  # it plants none of them
    silent = {n.rule for n in analysis.not_judged}
    assert {"straggler_rank", "exposed_communication"} <= silent  # one rank, no collectives
