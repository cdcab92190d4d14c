"""GPU time (span, busy, idle, kernel time) and kernel categories/tables.

Checked against TraceLens's own report of a real H100 trace, on hand-built traces whose answers
are worked out by hand, and on every trace in shared/traces.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from goodhart_prof.analysis.gpu.device_time import gpu_time
from goodhart_prof.analysis.intervals import merge_intervals
from goodhart_prof.analysis.gpu.kernels import CATEGORIES, categorize, category_table, kernel_table
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

H100 = DATA / "tracelens" / "h100_owlv2_inference.json.gz"
SHARED = DATA  # copies of ../shared/traces (tests/data/SOURCES.md)
# Every trace in shared/traces: the fixture copy where tests/data has one, else shared/ in place.
ALL_TRACES = {
    "tracelens/h100_owlv2_inference.json.gz": H100,
    "hta/v100_ddp_rank1.json.gz": DATA / "hta" / "v100_ddp_rank1.json.gz",
    "hta/mi250_minitoy_rocm.json.gz": DATA / "hta" / "mi250_minitoy_rocm.json.gz",
    "kineto/resnet50_v100_2021.pt.trace.json.gz": SHARED / "kineto" / "resnet50_v100_2021.pt.trace.json.gz",
    "param/dlrm_8rank": SHARED / "param" / "dlrm_8rank",
    "hta/sampled_128rank": SHARED / "hta" / "sampled_128rank",
}
REL = 1e-4  # 0.01%


@pytest.fixture(scope="module")
def h100():
    return load(H100)


def tracelens_csv(name: str) -> pd.DataFrame:
    return pd.read_csv(DATA / "tracelens" / name)


def union_us(frame: pd.DataFrame) -> float:
    s, e = merge_intervals(frame["ts"].to_numpy(), frame["end"].to_numpy())
    return float((e - s).sum())


# ---- hand-built traces -------------------------------------------------------------------------

def gpu_event(name, ts, dur, stream=7, device=0, cat="kernel", corr=None):
    args = {"device": device, "stream": stream}
    if corr is not None:
        args["correlation"] = corr
    return {"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
            "args": args}


def write_trace(tmp_path: Path, events: list[dict], name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_overlapping_streams_busy_is_union_kernel_time_is_sum(tmp_path):
    # stream 7: [0,10) [30,40); stream 8: [5,20); a memcpy [40,45) touching the last kernel.
    events = [gpu_event("gemm_a", 0, 10), gpu_event("gemm_b", 5, 15, stream=8),
              gpu_event("gemm_a", 30, 10),
              gpu_event("Memcpy DtoH (Device -> Pageable)", 40, 5, cat="gpu_memcpy"),
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": -50,
               "dur": 200}]
    row = gpu_time(load(write_trace(tmp_path, events))).iloc[0]
    assert (row["rank"], row["device"]) == (0, 0)
    assert row["span_us"] == 45 and row["busy_us"] == 35 and row["idle_us"] == 10
    assert row["utilization"] == pytest.approx(35 / 45)
    assert row["kernel_us"] == 35  # 10 + 15 + 10: the overlap counts twice, the memcpy not at all
    assert row["activity_count"] == 4
    assert (row["first_ts"], row["last_end"]) == (0, 45)


def test_one_row_per_device(tmp_path):
    events = [gpu_event("k", 0, 10, device=0), gpu_event("k", 100, 10, device=0),
              gpu_event("k", 50, 30, device=1), gpu_event("Memset (Device)", 90, 2, device=1,
                                                          cat="gpu_memset")]
    table = gpu_time(load(write_trace(tmp_path, events)))
    assert table["device"].tolist() == [0, 1]
    assert table["span_us"].tolist() == [110, 42]
    assert table["busy_us"].tolist() == [20, 32]
    assert table["kernel_us"].tolist() == [20, 30]


def test_no_gpu_activity_gives_empty_tables(tmp_path):
    trace = load(write_trace(tmp_path, [{"ph": "X", "cat": "cpu_op", "name": "aten::add",
                                         "pid": 1, "tid": 1, "ts": 0, "dur": 5}]))
    assert gpu_time(trace).empty and kernel_table(trace).empty and category_table(trace).empty


def test_kernel_and_category_tables_by_hand(tmp_path):
    events = [gpu_event("void at::native::vectorized_elementwise_kernel<4>()", 0, 10),
              gpu_event("void at::native::vectorized_elementwise_kernel<4>()", 20, 30),
              gpu_event("volta_sgemm_128x64_nn", 60, 40),
              gpu_event("Memcpy HtoD (Pageable -> Device)", 110, 20, cat="gpu_memcpy")]
    trace = load(write_trace(tmp_path, events))
    kt = kernel_table(trace)
    assert kt["name"].tolist() == ["void at::native::vectorized_elementwise_kernel<4>()",
                                   "volta_sgemm_128x64_nn",  # ties: by name
                                   "Memcpy HtoD (Pageable -> Device)"]
    assert kt["category"].tolist() == ["elementwise", "gemm", "memcpy"]
    assert kt["count"].tolist() == [2, 1, 1]
    assert kt["total_us"].tolist() == [40, 40, 20]
    assert kt.iloc[0][["mean_us", "min_us", "max_us"]].tolist() == [20, 10, 30]
    assert kt["pct"].tolist() == pytest.approx([40, 40, 20])
    ct = category_table(trace)
    assert ct["category"].tolist() == ["elementwise", "gemm", "memcpy"]
    assert ct["count"].tolist() == [2, 1, 1] and ct["pct"].sum() == pytest.approx(100)


# ---- TraceLens on the H100 trace ---------------------------------------------------------------

def test_h100_busy_and_span_match_tracelens(h100):
    timeline = tracelens_csv("gpu_timeline.csv").set_index("type")["time ms"] * 1000.0
    row = gpu_time(h100).iloc[0]
    assert row["busy_us"] == pytest.approx(timeline["busy_time"], rel=REL)
    assert row["span_us"] == pytest.approx(timeline["total_time"], rel=REL)
    assert row["idle_us"] == pytest.approx(timeline["idle_time"], rel=REL)
    # The numbers DESIGN.md quotes for this trace.
    assert row["busy_us"] == pytest.approx(566_759.473, rel=REL)
    assert row["span_us"] == pytest.approx(1_078_288.379, rel=REL)
    # TraceLens's "computation" is kernels and memsets together; its memcpy time is the memcpys'.
    gpu = h100.gpu
    assert union_us(gpu[gpu["cat"] != "gpu_memcpy"]) == pytest.approx(
        timeline["computation_time"], rel=REL)
    assert union_us(gpu[gpu["cat"] == "gpu_memcpy"]) == pytest.approx(
        timeline["total_memcpy_time"], rel=REL)


def test_h100_kernel_sums_and_counts_match_tracelens(h100):
    # TraceLens splits a kernel by the CPU op that launched it; summing over those rows gives the
    # per-name totals our table has. Its summary covers kernels only, not memcpy/memset.
    ref = (tracelens_csv("kernel_summary.csv")
           .groupby("Kernel name")
           .agg(total=("Kernel duration (µs)_sum", "sum"), count=("Kernel duration (µs)_count", "sum")))
    ours = kernel_table(h100)
    ours = ours[~ours["category"].isin(["memcpy", "memset"])].set_index("name")
    assert set(ours.index) == set(ref.index)
    ref = ref.loc[ours.index]
    assert (ours["count"] == ref["count"]).all()
    np.testing.assert_allclose(ours["total_us"], ref["total"], rtol=1e-9)
    assert ours["total_us"].sum() == pytest.approx(gpu_time(h100)["kernel_us"].iloc[0])


def test_h100_categories(h100):
    ct = category_table(h100).set_index("category")
    assert ct.index[0] == "reduction"  # the softmax over OWLv2's patch grid dominates
    assert ct.loc["memset", "count"] == 750 and ct.loc["memcpy", "count"] == 85
    # cuDNN's cutlass fprop kernel; its 15 layout transposes (nchwToNhwc/nhwcToNchw) are copies.
    assert ct.loc["conv", "count"] == 5 and ct.loc["copy", "count"] >= 15
    assert ct.loc["conv", "library"] == "cudnn" and ct.loc["gemm", "library"] == "cutlass"
    assert ct["pct"].sum() == pytest.approx(100)
    assert ct["total_us"].sum() == pytest.approx(h100.gpu["dur"].sum())


# ---- categories on real names ------------------------------------------------------------------

# Every distinct GPU activity name of the six shared traces and of our trainer's H200 trace
# (tests/data/gpu/h200_2026-11-26/full/clean), as their loader reads them.
NAMES_FILE = DATA / "kernel_names.tsv"

# (name prefix, category): every real name starting with the prefix must get the category.
REAL_PREFIXES = [
    ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize", "gemm"),
    ("volta_sgemm_", "gemm"),
    ("ampere_sgemm_", "gemm"),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs", "gemm"),  # ROCm Tensile
    ("Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs", "gemm"),
    ("void splitKreduce_kernel<", "gemm"),  # cuBLAS split-K epilogue (cublasSplitKParams)
    ("void cublasLt::splitKreduce_kernel<", "gemm"),
    ("void gemv2T_kernel_val<", "gemm"),
    ("std::enable_if<!(false), void>::type internal::gemvx::kernel<", "gemm"),
    ("void magma_sgemmEx_kernel<", "gemm"),
    # fbgemm is not a GEMM: its embedding and quantisation kernels carry the prefix.
    ("void fbgemm_gpu::permute_2D_lengths_kernel<", "copy"),
    ("void fbgemm_gpu::(anonymous namespace)::_compute_FP8_quantize_cuda_kernel<", "elementwise"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(", "communication"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(", "communication"),
    # implicit_convolve_sgemm is cuDNN's implicit-GEMM *convolution*, launched by
    # aten::cudnn_convolution: we call it conv (a user reading "gemm" would look for a matmul).
    ("void implicit_convolve_sgemm<", "conv"),
    ("void explicit_convolve_sgemm<", "conv"),
    ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized", "conv"),
    ("volta_scudnn_", "conv"),
    ("void cudnn::winograd_nonfused::winogradForwardData4x4<", "conv"),
    ("void cudnn::detail::dgrad_engine<", "conv"),
    ("void cudnn::cnn::wgrad_alg0_engine<", "conv"),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<", "copy"),  # layout, around a conv
    # Our trainer on an H200 (cuDNN 9, torch 2.11): cuDNN's layout transforms around its
    # convolutions are copies (`tensorTransformGeneric` holds no sort), randperm's tie shuffle
    # and top-k's gather are sorts, grad clipping's foreach norm a reduction.
    ("void cudnn::engines_precompiled::nhwcToNchwKernel<", "copy"),
    ("void transposeBlock_kernel<", "copy"),
    ("void tensorTransformGeneric<", "copy"),
    ("void convolve_common_engine_float_NHWC<", "conv"),
    ("void cutlass__5x_cudnn::Kernel<cutlass__5x_cudnn::reduction::kernel::ReduceSplitK<", "conv"),
    ("void cask_plugin__5x_cudnn::xmma__5x_cudnn::init_device_workspace_kernel<", "conv"),
    ("sm90_xmma_wgrad_indexed_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", "conv"),
    ("void (anonymous namespace)::randperm_handle_duplicate_keys_kernel<", "sort"),
    ("void at::native::sbtopk::gatherTopK<", "sort"),
    ("void at::native::radixSortKVInPlace<", "sort"),
    ("void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweepKernel<", "sort"),
    ("void at::native::lpnorm_cleanup<", "reduction"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
     "namespace)::TensorListMetadata<1>, at::native::LpNormFunctor<", "reduction"),
    ("nvjet_sm90_tst_", "gemm"),
    ("triton_poi_fused__to_copy_convolution_relu_", "elementwise"),
    ("triton_red_fused_convolution_backward_", "reduction"),
    ("void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::"
     "index_put_kernel_impl<", "scatter_gather"),
    ("void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::"
     "index_kernel_impl<", "scatter_gather"),
    ("void at::native::_scatter_gather_elementwise_kernel<", "scatter_gather"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<", "scatter_gather"),
    ("void (anonymous namespace)::indexing_backward_kernel<", "scatter_gather"),
    ("void split_embedding_codegen_forward_unweighted_kernel<", "scatter_gather"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<", "reduction"),
    ("void (anonymous namespace)::softmax_warp_forward<", "reduction"),
    ("void (anonymous namespace)::softmax_warp_backward<", "reduction"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<", "norm"),
    ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<", "norm"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<", "norm"),  # cuDNN batch norm
    ("void at::native::reduce_kernel<", "reduction"),
    ("void at::native::vectorized_elementwise_kernel<", "elementwise"),
    ("void at::native::unrolled_elementwise_kernel<", "elementwise"),
    ("void at::native::elementwise_kernel<", "elementwise"),
    # arange writing its own index: elementwise, not an indexing op.
    ("void (anonymous namespace)::elementwise_kernel_with_index<", "elementwise"),
    # foreach kernels are elementwise, but for the foreach vector norm (LpNormFunctor, below)
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
     "namespace)::FusedOptimizerTensorListMetadata<", "elementwise"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
     "namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOp", "elementwise"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
     "namespace)::TensorListMetadata<2>, ", "elementwise"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<", "copy"),
    ("void cub::DeviceRadixSortOnesweepKernel<", "sort"),
    ("Memcpy DtoH (Device -> Pageable)", "memcpy"),
    ("Memset (Device)", "memset"),
]

# Spellings of newer stacks that the shared traces do not have (PyTorch 2.x flash attention and
# Inductor, xformers-style memory-efficient attention, NCCL >= 2.19, cuBLAS 12 on Hopper).
NEWER_NAMES = [
    ("nvjet_tst_64x8_64x16_2x1_v_bz_splitK_TNT", "gemm"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    # Flash attention carries cutlass types in its template arguments; it is attention, not gemm.
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
     "cutlass::half_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::half_t> >, false, false, "
     "false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)", "attention"),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80", "attention"),
    ("sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_"
     "warpsize2x2x1_g1_tensor16x8x16_kernel", "conv"),
    # Inductor names kernels after the ops they fuse; the prefix says the kind (library triton).
    ("triton_poi_fused_arange_ge_index_put_lift_fresh_0", "elementwise"),
    ("triton_poi_fused__scaled_dot_product_flash_attention_add_mul_permute_stack_sub_unbind_view",
     "elementwise"),
    ("triton_poi_fused_convolution_relu_0", "elementwise"),
    ("triton_red_fused_native_layer_norm_0", "norm"),
    ("triton_per_fused__softmax_0", "reduction"),
    ("triton_tem_fused_addmm_0", "gemm"),
    ("triton__0d1d2de", "other"),  # Inductor before PyTorch 2.1: the name says nothing
]


@pytest.fixture(scope="module")
def real_names() -> pd.DataFrame:
    names = pd.read_csv(NAMES_FILE, sep="\t", quoting=csv.QUOTE_NONE, dtype=str,
                        keep_default_na=False)
    return names.assign(category=categorize(names["name"], names["cat"]))


@pytest.mark.parametrize("prefix, category", REAL_PREFIXES)
def test_categorize_real_names(real_names, prefix, category):
    matched = real_names[real_names["name"].str.startswith(prefix)]
    assert len(matched), f"no name in {NAMES_FILE.name} starts with {prefix!r}"
    assert set(matched["category"]) == {category}


def test_categorize_newer_names():
    got = categorize([n for n, _ in NEWER_NAMES]).tolist()
    assert got == [c for _, c in NEWER_NAMES]


def test_every_real_name_gets_a_category(real_names):
    assert set(real_names["category"]) <= set(CATEGORIES)
    copies = real_names[real_names["cat"] != "kernel"]
    assert (copies["category"] == copies["cat"].str.removeprefix("gpu_")).all()
    kernels = real_names[real_names["cat"] == "kernel"]
    assert not kernels["category"].isin(["memcpy", "memset"]).any()
    # Few kernels are left uncategorised (a handful of fbgemm/TorchRec helpers).
    assert (kernels["category"] == "other").mean() < 0.03


def test_categorize_follows_event_category_for_copies():
    names = pd.Categorical(["Memcpy DtoD (Device -> Device)", "Memset (Device)",
                            "volta_sgemm_128x64_nn", "volta_sgemm_128x64_nn"])
    cats = ["gpu_memcpy", "gpu_memset", "kernel", "gpu_memcpy"]
    assert categorize(pd.Series(names), cats).tolist() == ["memcpy", "memset", "gemm", "memcpy"]
    # By name alone a memcpy/memset still lands in its category (ROCm blit kernels too).
    assert categorize(["Memcpy HtoD (Pinned -> Device)", "Memset (Device)",
                       "__amd_rocclr_copyBuffer"]).tolist() == ["memcpy", "memset", "memcpy"]


def test_categorize_maps_codes_of_a_categorical():
    values = ["volta_sgemm_128x64_nn", "ncclKernel_x", "volta_sgemm_128x64_nn", "unknown_kernel"]
    col = pd.Series(pd.Categorical(values, categories=values[:2] + ["unused_norm"] + values[3:]))
    assert categorize(col).tolist() == ["gemm", "communication", "gemm", "other"]
    assert categorize([]).tolist() == []


# ---- every shared trace ------------------------------------------------------------------------

@pytest.mark.parametrize("key", sorted(ALL_TRACES))
def test_every_trace_gives_finite_gpu_time_and_tables(key):
    path = ALL_TRACES[key]
    if not path.exists():
        pytest.skip(f"{path} missing: shared/traces is expected at ../shared/traces from the repo root")
    trace = load(path)
    table = gpu_time(trace)
    assert len(table) == len(trace.devices) > 0
    numbers = table.drop(columns=["rank", "device"]).to_numpy(float)
    assert np.isfinite(numbers).all()
    assert ((table["busy_us"] > 0) & (table["busy_us"] <= table["span_us"] + 1e-6)).all()
    assert ((table["utilization"] > 0) & (table["utilization"] <= 1)).all()
    kt, ct = kernel_table(trace), category_table(trace)
    assert np.isfinite(kt[["total_us", "mean_us", "min_us", "max_us", "pct"]].to_numpy(float)).all()
    assert kt["count"].sum() == ct["count"].sum() == len(trace.gpu)
    assert ct["pct"].sum() == pytest.approx(100)
    assert set(ct["category"]) <= set(CATEGORIES)
    assert kt["total_us"].is_monotonic_decreasing
