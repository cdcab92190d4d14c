"""CUPTI counters per kernel and per op (analysis/gpu/cupti.py) on HTA's A100 trace; FLOPs recounted
from the raw events (an FMA is 2 FLOPs, as HTA counts them)."""
from __future__ import annotations

import gzip
import json

import pytest

from goodhart_prof.analysis.gpu.cupti import cupti_counters
from goodhart_prof.trace.load import load
from tests.support.events import load_events, op
from tests.support.paths import DATA

CUPTI = DATA / "hta" / "cupti_counters_a100.json.gz"
P = "smsp__sass_thread_inst_executed_op_"


def _flops(args: dict, prec: str) -> float:
    return 2 * args[f"{P}{prec}fma_pred_on.sum"] + args[f"{P}{prec}mul_pred_on.sum"] + args[f"{P}{prec}add_pred_on.sum"]


@pytest.fixture(scope="module")
def counters():
    return cupti_counters(load(CUPTI))


def test_flops_by_precision_and_kernel(counters):
    raw = [e for e in json.load(gzip.open(CUPTI))["traceEvents"] if e.get("cat") == "cuda_profiler_range"]
    assert counters.ranges == 77 and len(counters.counters) == 9 and counters.matched
    for prec, name in (("f", "fp32"), ("h", "fp16"), ("d", "fp64")):
        assert counters.flops_by_precision[name] == pytest.approx(sum(_flops(e["args"], prec) for e in raw))
    sgemm = [e for e in raw if e["name"] == "ampere_sgemm_32x32_sliced1x4_tn"]
    top = counters.kernels.iloc[0]
    assert top["name"] == "ampere_sgemm_32x32_sliced1x4_tn" and top["ranges"] == len(sgemm) == 6
    assert top["flops"] == pytest.approx(sum(_flops(e["args"], p) for e in sgemm for p in "fhd"))


def test_each_range_takes_the_op_around_its_launch(counters):
    raw = json.load(gzip.open(CUPTI))["traceEvents"]
    launches = sum(1 for e in raw if e.get("name") == "cudaLaunchKernel")
    assert launches == 77  # one launch per range: the n-th range is the n-th launch
    ops = counters.ops.set_index("op")
    assert ops.loc["aten::cudnn_convolution", "ranges"] == 28 and ops.loc["aten::addmm", "ranges"] == 12
    assert ops["ranges"].sum() == 77
    assert ops["flops"].sum() == pytest.approx(counters.kernels["flops"].sum())


def test_no_counters_no_section(tmp_path):
    assert cupti_counters(load_events(tmp_path, [op("aten::mm", 0, 5)])) is None


def test_the_pairing_hta_s_own_test_asserts(counters):
    """HTA's tests/test_cupti_profiler.py on this trace: 77 rows; the 6th kernel by start is an
    fft2d_r2c_32x32 with fadd 86,114,304, top-level op aten::conv2d, bottom op aten::cudnn_convolution."""
    row = counters.per_range.sort_values("ts").iloc[5]
    assert len(counters.per_range) == 77 and "fft2d_r2c_32x32" in row["name"]
    assert row["smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"] == 86114304
    assert (row["top_op"], row["op"]) == ("aten::conv2d", "aten::cudnn_convolution")
