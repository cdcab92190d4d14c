"""Precision of GEMM/conv kernels (analysis/gpu/precision.py), the `input_types` column it reads, and
the `no_amp` rule on hand-built and shared traces."""
from __future__ import annotations

import json

import numpy as np
import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.gpu.precision import kernel_name_dtype, kernel_precision, op_dtype
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

# Copies of the real traces of ../shared/traces (tests/data/SOURCES.md), same relative paths.
SHARED = DATA
BF16, FP32 = ["c10::BFloat16", "c10::BFloat16"], ["float", "float"]


def X(name, cat, ts, dur, pid=100, tid=100, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid,
            "args": args}


def op(name, ts, dur, types=None):
    """A cpu op; `types` is its `Input type` as record_shapes writes it (absent when None)."""
    return X(name, "cpu_op", ts, dur, **({} if types is None else {"Input type": types}))


def launch(ts, corr, kernel_name, dur=500):
    return [X("cudaLaunchKernel", "cuda_runtime", ts, 5, correlation=corr),
            X(kernel_name, "kernel", ts + 6, dur, pid=0, tid=7, device=0, stream=7, correlation=corr)]


def load_events(tmp_path, events, name="t.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return load(path)


def gemm_trace(tmp_path, calls, name="t.json"):
    """One GEMM per call, each `(ops, kernel name)`: `ops` a list of (name, types) nested
    outermost first around the launch."""
    events, t = [X("ProfilerStep#1", "user_annotation", 0, 1e7)], 10.0
    for i, (ops, kernel_name) in enumerate(calls):
        for depth, (name, types) in enumerate(ops):
            events.append(op(name, t + depth, 30 - 2 * depth, types))
        events += launch(t + len(ops) + 1, i + 1, kernel_name)
        t += 600
    return load_events(tmp_path, events, name)


def no_amp(trace):
    return next((f for f in analyze(trace).findings if f.rule == "no_amp"), None)


# -- the column ------------------------------------------------------------------------------------
def test_input_types_column_joins_the_list_and_is_empty_where_absent(tmp_path):
    trace = load_events(tmp_path, [op("aten::mm", 0, 5, BF16), op("aten::relu", 10, 5),
                                   op("aten::add", 20, 5, ["float", "", "Scalar"])])
    col = trace.events["input_types"]
    assert col.dtype == "category"
    assert col.tolist()[0] == "c10::BFloat16, c10::BFloat16" and col.tolist()[2] == "float, , Scalar"
    assert col.isna().tolist() == [False, True, False]


def test_odd_input_types_load(tmp_path):
    odd = [3, [[1, 2], ["float"]], {"a": 1}, "float", [None, 1.5, "c10::BFloat16"], [], True]
    trace = load_events(tmp_path, [op("aten::mm", i * 10, 5, v) for i, v in enumerate(odd)])
    assert trace.skipped_events == 0
    labels = trace.events["input_types"].tolist()
    assert labels[1] == ", " and labels[3] == "float" and labels[4] == ", , c10::BFloat16"
    assert [isinstance(v, float) and np.isnan(v) for v in labels] == [True, False, True, False, False,
                                                                      False, True]


def test_input_types_survive_a_folder_of_ranks(tmp_path):
    for r in range(2):
        (tmp_path / f"rank-{r}.json").write_text(json.dumps({
            "distributedInfo": {"rank": r, "world_size": 2},
            "traceEvents": [op("aten::mm", 0, 5, BF16 if r else FP32), op("aten::relu", 9, 1)]}))
    col = load(tmp_path).events["input_types"]
    assert col.dtype == "category" and sorted(col.dropna().tolist()) == ["c10::BFloat16, c10::BFloat16",
                                                                         "float, float"]


# -- the dtype of a kernel -------------------------------------------------------------------------
@pytest.mark.parametrize("name, dtype", [
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x256x32_MI16x16x1_SN_LDSB1", "bf16"),
    ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64_MI16x16x1_SN", "bf16"),
    ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32", "fp16"),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN", "fp32"),
    ("volta_sgemm_128x32_nt", "fp32"), ("ampere_sgemm_128x64_nn", "fp32"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x64_32x6_nt_align1>(x)", "tf32"),
    ("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8", "bf16"),
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_tn", "fp16"),
    ("turing_h1688gemm_256x128_ldg8_tn", "fp16"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", "bf16"),
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16", "tf32"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", "bf16"), ("nvjet_hsh_64x8_64x16_4x1_v_bz_TNT", "fp16"),
    ("nvjet_sss_128x64_64x6_2x1_v_bz_NNN", "fp32"),
    ("void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int)", "fp32"),
    ("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false>(x)", "fp32"),
    ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8", "bf16"),
    ("_ZN2ck16tensor_operation6device37kernel_batched_gemm_xdlops_bwd_weightINS_47GridwiseGemm_bk0mk1_"
     "bk0nk1_mn_xdlops_bwd_weightILi64EttftLNS_25InMemoryDataOperationEnumE1E", "bf16"),
    ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128", "fp8"),
    ("cask_cudnn::computeOffsetsKernel(cask_cudnn::ComputeOffsetsParams)", "unknown"),
])
def test_kernel_name_dtype(name, dtype):
    assert kernel_name_dtype(name) == dtype


def test_op_dtype_reads_the_narrowest_typed_input():
    assert op_dtype("c10::BFloat16, c10::BFloat16, , Scalar") == "bf16"
    assert op_dtype("c10::Float8_e4m3fn, c10::Float8_e4m3fn, float, float") == "fp8"
    assert op_dtype("float, float, Scalar, Scalar") == "fp32"
    assert op_dtype("long, long") == "unknown" and op_dtype("") == "unknown"


def test_the_launching_op_wins_over_the_name_and_tf32_stays_tf32(tmp_path):
    trace = gemm_trace(tmp_path, [
        ([("aten::linear", FP32), ("aten::addmm", BF16)], "gemm_kernel_of_no_type"),  # innermost op
        ([("aten::mm", FP32), ("aten::empty_like", None)], "ampere_sgemm_128x64_nn"),  # climbs to mm
        ([("aten::mm", FP32)], "cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4"),  # TF32 math
        ([("aten::relu", None)], "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN"),  # name only
        ([], "gemm_kernel_of_no_type")])  # nothing says
    table = kernel_precision(trace)
    assert table["dtype"].tolist() == ["bf16", "fp32", "tf32", "bf16", "unknown"]
    assert table["source"].tolist() == ["op_input_type", "op_input_type", "op_input_type",
                                        "kernel_name", "unknown"]
    assert table["op"].tolist() == ["aten::addmm", "aten::mm", "aten::mm", "", ""]
    assert kernel_precision(trace) is table  # cached on the trace


# -- the rule --------------------------------------------------------------------------------------
def test_no_amp_reads_the_op_not_the_name(tmp_path):
    bf16 = gemm_trace(tmp_path, [([("aten::mm", BF16)], "Cijk_Alik_Bljk_SB_MT64x16x32")] * 20, "b.json")
    assert no_amp(bf16) is None
    fp32 = gemm_trace(tmp_path, [([("aten::mm", FP32)], "gemm_kernel_of_no_type")] * 20, "f.json")
    found = no_amp(fp32)
    assert found is not None and found.evidence["low_precision_us"] == 0
    assert found.evidence["by_dtype"] == {"fp32": {"total_us": 10_000.0, "sources": {"op_input_type": 10_000.0}}}
    assert found.evidence["top"][0] == {"name": "gemm_kernel_of_no_type", "dtype": "fp32",
                                        "source": "op_input_type", "op": "aten::mm", "count": 20,
                                        "total_us": 10_000.0}


def test_no_amp_is_silent_when_most_gemm_time_is_of_unknown_precision(tmp_path):
    calls = [([], "gemm_kernel_of_no_type")] * 12 + [([("aten::mm", FP32)], "gemm_kernel_of_no_type")] * 8
    assert no_amp(gemm_trace(tmp_path, calls)) is None
    calls = [([], "gemm_kernel_of_no_type")] * 8 + [([("aten::mm", FP32)], "gemm_kernel_of_no_type")] * 12
    found = no_amp(gemm_trace(tmp_path, calls, "u.json"))
    assert found is not None and found.evidence["unknown_us"] == 4000.0


# -- shared traces: the verdict read from each ----------------------------------------------------
# (trace, no_amp fires, the dtype of most GEMM/conv time). How each was read: mi250_minitoy's
# Tensile `Cijk_*_SB_*` GEMMs run under ops whose inputs are `float`; sampled_128rank's A100 GEMMs
# are `s1688gemm` (TF32) and `ampere_sgemm` under `aten::mm(float, float)`; the V100 traces
# (ddp: no shapes, `volta_sgemm`; ResNet-50 2021: `float` convolutions) are fp32; DLRM's fp32
# GEMMs are under 10% of its kernel time (embeddings dominate), so precision is not judged; the
# H100 and MI300 traces are bf16 by their ops (`c10::BFloat16`) and names (`bf16_s16816gemm`,
# `Cijk_*_BBS_*`, CK `ttft`); the vLLM graph replay is bf16 by its Tensile names.
VERDICTS = [
    ("hta/mi250_minitoy_rocm.json.gz", True, "fp32"),
    ("hta/sampled_128rank", True, "tf32"),
    ("hta/v100_ddp_rank1.json.gz", True, "fp32"),
    ("kineto/resnet50_v100_2021.pt.trace.json.gz", True, "fp32"),
    ("param/dlrm_8rank", False, "fp32"),
    ("tracelens/h100_bert_small_inference.json.gz", False, "bf16"),
    ("tracelens/h100_owlv2_inference.json.gz", False, "bf16"),
    ("tracelens/mi300_qwen_inference.json.gz", False, "bf16"),
    ("tracelens/mi300_resnet_act_checkpoint_train.json.gz", False, "bf16"),
    ("tracelens/sglang_qwen3_8b_prefilldecode.json.gz", False, "bf16"),
    # decode as one graph replay: hipBLASLt `Cijk_Alik_Bljk_BBS_BH_*` GEMMs, bf16 in and out
    ("tracelens/sglang_qwen3_8b_decode.json.gz", False, "bf16"),
    # AlexNet forward on an A100 in fp32: `ampere_sgemm`, `scudnn` fp32 and tf32 implicit GEMMs
    # (`ampere_gcgemm` has no type in its name and its op records no input types: unknown, 9%)
    ("hta/critical_path_simple_add.json.gz", True, "fp32"),
    # HTA's own output on that input (its ops with `critical` args and the path's flow events)
    ("hta/critical_path_simple_add_hta_overlaid.json.gz", True, "fp32"),
    # no kernel events at all (CUPTI counter ranges instead): nothing to judge, no_amp silent
    ("hta/cupti_counters_a100.json.gz", False, None),
    # the MoE GEMMs (`_matmul_ogs_*`, mxfp4 weights: the taxonomy counts them as gemm) lead
    ("tracelens/vllm_decode_full_graph.json.gz", False, "fp4"),
    # xDiT FLUX.1 on an MI300X, compiled: hipBLASLt `Cijk_*_BBS_*` GEMMs, bf16 (findings_labels.json)
    ("tracelens/xdit_flux_capture.json.gz", False, "bf16"),
]


@pytest.mark.parametrize("rel, fires, dtype", VERDICTS, ids=[v[0] for v in VERDICTS])
def test_shared_trace_verdicts(rel, fires, dtype):
    path = SHARED / rel
    if not path.exists():
        pytest.skip(f"{path} not present (shared traces live beside the repository)")
    trace = load(path)
    table = kernel_precision(trace)
    if dtype is None:
        assert table.empty and no_amp(trace) is None
        return
    by_dtype = table.groupby("dtype")["dur"].sum()
    assert by_dtype.idxmax() == dtype
    assert by_dtype.get("unknown", 0) < 0.1 * by_dtype.sum()
    found = no_amp(trace)
    assert (found is not None) == fires
    if found is not None:
        assert found.evidence["low_precision_us"] == 0
        assert found.evidence["top"][0]["dtype"] == dtype


def test_shared_traces_are_all_listed():
    if not SHARED.exists():
        pytest.skip(f"{SHARED} not present")
    listed = {v[0].split("/")[0] + "/" + v[0].split("/")[1] for v in VERDICTS}
    present = {f"{p.parent.name}/{p.name}" for p in SHARED.glob("*/*") if p.parent.name != "ours"
               and (p.name.endswith(".json.gz") or (p.is_dir() and any(p.glob("*.json.gz"))))}
    assert present <= listed, present - listed
