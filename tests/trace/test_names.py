"""goodhart_prof/trace/names.py: `kernel_name`, a kernel's short name for tables. C++ kernels lose
their return type, namespaces, template arguments and parameters (CUTLASS's wrapper gives its
inner kernel), plain names (Triton, cuBLAS, Tensile, NCCL, memcpy) stay, and a width cuts it."""
from __future__ import annotations

import pytest

from goodhart_prof.trace.names import kernel_name


@pytest.mark.parametrize("full, shown", [
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
     "cunn_SoftMaxForward<...>"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>"
     "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)",
     "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8"),
    ("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float>(int)",
     "gemvx::kernel<...>"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "ncclKernel_AllReduce_RING_LL_Sum_float"),
    ("triton_poi_fused_add_mul_0", "triton_poi_fused_add_mul_0"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x256x32_MI16x16x1_SN_LDSB1",
     "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x256x32_MI16x16x1_SN_LDSB1"),
    ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
    ("ampere_sgemm_128x64_nn", "ampere_sgemm_128x64_nn"),
])
def test_kernel_names_are_shortened_for_tables(full, shown):
    assert kernel_name(full) == shown


def test_kernel_name_cut_to_a_width():
    name = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x256x32_MI16x16x1_SN_LDSB1"
    assert kernel_name(name, 20) == name[:19] + "…"


@pytest.mark.parametrize("full, shown", [
    ("void at::native::run<float>(float*)", "native::run<...>"),  # a generic name keeps its namespace
    ("void cutlass::device_kernel<flash::FlashAttnFwd<Params>>(Params)", "FlashAttnFwd<...>"),
    ("  void kernel_body(int)  ", "kernel_body"),
    (7, "7"),  # a name that is not text (a number in the trace): its text
    ("", ""),
])
def test_generic_names_wrappers_and_odd_values(full, shown):
    assert kernel_name(full) == shown


def test_a_name_within_the_width_is_not_cut():
    assert kernel_name("ampere_sgemm_128x64_nn", 22) == "ampere_sgemm_128x64_nn"
    assert kernel_name("ampere_sgemm_128x64_nn", 21) == "ampere_sgemm_128x64_…"  # 21 characters with the ellipsis
