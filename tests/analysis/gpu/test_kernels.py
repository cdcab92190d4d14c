"""Kernel taxonomy (category + library, name vs launching-op precedence) on hand-made names and
traces and on every trace in ../shared/traces."""
from __future__ import annotations


import pytest

from goodhart_prof.analysis.gpu.kernels import (CATEGORIES, LIBRARIES, category_table, classify,
                                            kernel_table, library_table)
from goodhart_prof.trace.load import load
from tests.support.events import ann, launch, load_events
from tests.support.paths import DATA

# Copies of the real traces of ../shared/traces (tests/data/SOURCES.md), same relative paths.
SHARED = DATA
# Every trace in ../shared/traces (a folder of ranks counts as one trace).
SHARED_TRACES = [
    "tracelens/h100_owlv2_inference.json.gz", "tracelens/h100_bert_small_inference.json.gz",
    "tracelens/mi300_qwen_inference.json.gz", "tracelens/mi300_resnet_act_checkpoint_train.json.gz",
    "tracelens/sglang_qwen3_8b_prefilldecode.json.gz", "tracelens/vllm_decode_full_graph.json.gz",
    "hta/v100_ddp_rank1.json.gz", "hta/mi250_minitoy_rocm.json.gz", "hta/sampled_128rank",
    "kineto/resnet50_v100_2021.pt.trace.json.gz", "param/dlrm_8rank"]

# (name, category, library), by name alone.
NAMES = [
    # Triton user kernels (triton_kernels' MoE GEMM, AOTriton attention, routing, top-k).
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1", "gemm", "triton"),
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu", "gemm", "triton"),
    ("attn_fwd", "attention", "triton"),
    ("sage_fwd", "attention", "triton"),
    ("kernel_unified_attention_3d", "attention", "triton"),
    ("_topk_forward", "sort", "triton"),
    ("_combined_routing_compute", "scatter_gather", "triton"),
    # A Triton compute kernel ending in _memset is a kernel, not a memset.
    ("_combined_routing_memset", "scatter_gather", "triton"),
    ("_sum_bitmatrix_rows", "reduction", "triton"),
    ("_finalize_matmul_scatter_bf16", "scatter_gather", "triton"),
    # B200 batched GEMMs (TensorRT-LLM generated, fp4/fp8).
    ("bmm_E2m1_E2m1E2m1_Fp32_t128x8x256u2_s6_et128x8_m128x8x64_cga1x1x1_16dp256b_TN_transOut_"
     "schedS_bN_dynBatch_sm100a", "gemm", "trtllm"),
    ("bmm_E4m3_E4m3E4m3_Fp32_t128x16x128_s4_et128x16_m128x16x32_cga1x1x1_16dp256b_TN_sm100a",
     "gemm", "trtllm"),
    # Layout copies.
    ("batched_transpose_16x32_half", "copy", "miopen"),
    ("transpose_NCHW2CNHW_V2_2D_WG_off64", "copy", "miopen"),
    ("SubTensorOpWithCastTensor1d", "copy", "miopen"),
    ("SubTensorOpWithScalar1d", "copy", "miopen"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>"
     "(float*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, "
     "128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, "
     "unsigned int)", "copy", "aten"),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, "
     "false, true, (cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>"
     ", __nv_bfloat16 const*, __nv_bfloat16*)", "copy", "cudnn"),
    # cuDNN's layout transforms around a convolution (an H200 trace of our trainer): copies, not a
    # sort (`tenSORTransform`), and cuDNN's whether or not the trace links their launch.
    ("void tensorTransformGeneric<__nv_bfloat16, __nv_bfloat16, float, true, false, false, "
     "(cudnnKernelDataType_t)0>(cudnnTensorTransformStruct, tensorTransformParams, __nv_bfloat16 "
     "const*, __nv_bfloat16*)", "copy", "cudnn"),
    ("void transposeBlock_kernel<__nv_bfloat16, __nv_bfloat16, float, 32u, 8u>(int, int, int, "
     "float, __nv_bfloat16 const*, __nv_bfloat16*)", "copy", "cudnn"),
    # a plain transposeBlock_kernel of someone else's (HPCG) is a copy, not cuDNN's
    ("transposeBlock_kernel(int, int, double*, int*, double*, int*, int)", "copy", "other"),
    ("void convolve_common_engine_float_NHWC<__nv_bfloat16, __nv_bfloat16, 128, 5, 5, 3, 3, 3, "
     "true, false, false, false, false>(int, int, int, __nv_bfloat16 const*)", "conv", "cudnn"),
    # cuDNN 9's split-K reduction of an implicit-GEMM convolution: conv, not a cutlass GEMM
    ("void cutlass__5x_cudnn::Kernel<cutlass__5x_cudnn::reduction::kernel::ReduceSplitK<"
     "cutlass__5x_cudnn::MatrixShape<4, 256>, float> >(float)", "conv", "cudnn"),
    # Sorts are words: randperm sorts random keys and shuffles the ties; top-k's gather.
    ("void (anonymous namespace)::randperm_handle_duplicate_keys_kernel<long, at::native::"
     "(anonymous namespace)::OpaqueType<8> >(long*, at::native::(anonymous namespace)::OpaqueType"
     "<8>*, long, at::PhiloxCudaState)", "sort", "aten"),
    ("void at::native::sbtopk::gatherTopK<unsigned char, unsigned int, 1, false>(int)", "sort",
     "aten"),
    ("void at::native::radixSortKVInPlace<-2, -1, 32, 4, unsigned char, long, unsigned int>(int)",
     "sort", "aten"),
    # Grad clipping's foreach vector norm is a reduction, not a normalization layer.
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
     "namespace)::TensorListMetadata<1>, at::native::LpNormFunctor<float, (at::native::NormType)1,"
     " float, float>, float*, int>(int)", "reduction", "aten"),
    ("void at::native::lpnorm_cleanup<float, (at::native::NormType)1, float, true, float>(float "
     "const*, at::native::TensorListAddresses, int)", "reduction", "aten"),
    # Words inside other words say nothing: a mempool is no pooling, reindexing no index op.
    ("void mempool_trim_kernel<int>(int)", "other", "other"),
    # FlashInfer's norm is a norm, not attention (`flash` inside `flashinfer`); SGLang's Triton
    # kernel filling FlashInfer's KV page indices (its decode traces) gathers indices.
    ("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*)", "norm",
     "flashinfer"),
    ("create_flashinfer_kv_indices_triton", "scatter_gather", "triton"),
    # Inductor: the prefix says the kind.
    ("triton_poi_fused_convolution_relu_0", "elementwise", "triton"),
    ("triton_red_fused_native_layer_norm_0", "norm", "triton"),
    ("triton_red_fused_linalg_vector_norm_0", "reduction", "triton"),
    ("triton_per_fused__softmax_0", "reduction", "triton"),
    ("triton_tem_fused_addmm_0", "gemm", "triton"),
    ("triton_tem_fused_flex_attention_0", "attention", "triton"),
    # Vendor libraries.
    ("nvjet_tst_64x8_64x16_2x1_v_bz_splitK_TNT", "gemm", "cublas"),
    ("volta_sgemm_128x64_nn", "gemm", "cublas"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
     "segment_k_off_kernel__5x_cublas", "gemm", "cublas"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2>"
     "(cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2::Params)", "gemm", "cutlass"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x256x32_MI16x16x1_SN_LDSB1", "gemm",
     "hipblaslt"),
    ("_ZN2ck16tensor_operation6device37kernel_batched_gemm_xdlops_bwd_weightINS_47GridwiseGemm",
     "conv", "composable_kernel"),
    ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2", "conv", "miopen"),
    ("volta_scudnn_128x64_relu_interior_nn_v1", "conv", "cudnn"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
     "cutlass::half_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::half_t> >, false, false, "
     "false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)", "attention",
     "flash_attention"),
    ("_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePass", "norm",
     "composable_kernel"),
    ("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_",
     "norm", "aiter"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "communication", "nccl"),
    ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*)",
     "elementwise", "vllm"),
    ("void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16>(__hip_bfloat16 const*)",
     "scatter_gather", "vllm"),
    ("void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, int>::"
     "Policy800, false, long, int, int, int>(int*)", "sort", "cub"),
    ("void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>(int)", "copy",
     "fbgemm"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::NormTwoOps"
     "<float, float, float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float>)",
     "reduction", "aten"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
     "(int, float)", "norm", "aten"),
    ("void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int)",
     "reduction", "aten"),
    ("__amd_rocclr_fillBufferAligned", "memset", "runtime"),
]


@pytest.mark.parametrize("name, category, library", NAMES)
def test_name_gives_category_and_library(name, category, library):
    cat, lib = classify([name])
    assert (cat[0], lib[0]) == (category, library)


def test_memcpy_memset_events_are_runtime_whatever_their_name():
    cat, lib = classify(["_combined_routing_memset", "Memset (Device)", "x"],
                        ["kernel", "gpu_memset", "gpu_memcpy"])
    assert cat.tolist() == ["scatter_gather", "memset", "memcpy"]
    assert lib.tolist() == ["triton", "runtime", "runtime"]


def test_launching_op_overrides_only_generic_names():
    names = ["void my_kernel<int>(int)", "Cijk_Alik_Bljk_HHS_BH", "Cijk_Alik_Bljk_HHS_BH",
             "void at::native::vectorized_elementwise_kernel<4>(int)",
             "void at::native::vectorized_elementwise_kernel<4>(int)",
             "void at::native::vectorized_elementwise_kernel<4>(int)",
             "void (anonymous namespace)::softmax_warp_forward<float>(float*)",
             "void pytorch_flash::flash_fwd_kernel<int>(int)", "void other_kernel<int>(int)"]
    ops = ["aten::topk", "aten::convolution_backward", "aten::mm", "aten::native_batch_norm",
           "aten::cat", "aten::add", "aten::mm", "aten::mm", None]
    cat, lib = classify(names, ops=ops)
    # a name saying nothing takes the op's category; a GEMM-shaped kernel is a conv under a
    # convolution op; TensorIterator kernels are norm / copy under norm / cat; names that say
    # what they compute stay (softmax, flash); no op, no change.
    assert cat.tolist() == ["sort", "conv", "gemm", "norm", "copy", "elementwise", "reduction",
                            "attention", "other"]
    # a kernel no library rule places, launched by an aten:: op, is PyTorch's own
    assert lib.tolist() == ["aten", "hipblaslt", "hipblaslt", "aten", "aten", "aten", "aten",
                            "flash_attention", "other"]


def test_a_kernel_has_one_library_whether_or_not_its_launch_is_linked():
    # The kernels still running when tracing began have no launch in the trace (no op): the same
    # name launched by an aten:: op elsewhere is aten on every row, not aten here and other there.
    names = ["void my_kernel<int>(int)", "void my_kernel<int>(int)", "void lone<int>(int)",
             "void transposeBlock_kernel<__nv_bfloat16, __nv_bfloat16, float, 32u, 8u>(int)",
             "void transposeBlock_kernel<__nv_bfloat16, __nv_bfloat16, float, 32u, 8u>(int)"]
    ops = [None, "aten::topk", None, "aten::convolution_backward", None]
    cat, lib = classify(names, ops=ops)
    assert lib.tolist() == ["aten", "aten", "other", "cudnn", "cudnn"]
    # the category still follows the op where the name says nothing (and stays without one)
    assert cat.tolist() == ["other", "sort", "other", "copy", "copy"]


def test_every_category_and_library_is_declared():
    cat, lib = classify([n for n, _, _ in NAMES])
    assert set(cat) <= set(CATEGORIES) and set(lib) <= set(LIBRARIES)
    assert "triton" not in CATEGORIES  # a library, not a category


def test_tables_carry_library_and_follow_the_launching_op(tmp_path):
    events = [ann("ProfilerStep#1", 0, 10_000)]
    events += launch("Cijk_Alik_Bljk_HHS_BH", 100, 1, "aten::mm")
    events += launch("Cijk_Alik_Bljk_HHS_BH", 300, 2, "aten::miopen_convolution")
    events += launch("void my_kernel<int>(int)", 500, 3, "aten::sort")
    events += launch("_combined_routing_memset", 700, 4)
    trace = load_events(tmp_path, events)
    kt = kernel_table(trace)
    rows = {(r.name, r.category): r.library for r in kt.itertuples()}
    assert rows == {("Cijk_Alik_Bljk_HHS_BH", "gemm"): "hipblaslt",
                    ("Cijk_Alik_Bljk_HHS_BH", "conv"): "hipblaslt",
                    ("void my_kernel<int>(int)", "sort"): "aten",
                    ("_combined_routing_memset", "scatter_gather"): "triton"}
    lt = library_table(trace).set_index("library")
    assert lt.loc["hipblaslt", "count"] == 2 and lt["pct"].sum() == pytest.approx(100)
    ct = category_table(trace).set_index("category")
    assert "memset" not in ct.index and ct.loc["gemm", "library"] == "hipblaslt"


# ---- every shared trace ------------------------------------------------------------------------
OTHER_LIMIT = 10.0  # percent of GPU kernel time a trace may leave in `other`


def other_share(trace) -> float:
    kt = kernel_table(trace)
    kernels = kt[~kt["category"].isin(["memcpy", "memset"])]
    total = kernels["total_us"].sum()
    return 100.0 * kernels.loc[kernels["category"] == "other", "total_us"].sum() / total


@pytest.mark.parametrize("key", SHARED_TRACES)
def test_shared_trace_leaves_little_in_other(key):
    path = SHARED / key
    if not path.exists():
        pytest.skip(f"{path} missing: shared/traces is expected at ../shared/traces")
    trace = load(path, progress=False)
    share = other_share(trace)
    print(f"{key}: other {share:.2f}% of GPU kernel time")
    assert share <= OTHER_LIMIT
    kt = kernel_table(trace)
    assert set(kt["category"]) <= set(CATEGORIES) and set(kt["library"]) <= set(LIBRARIES)
    assert library_table(trace)["total_us"].sum() == pytest.approx(trace.gpu["dur"].sum())
