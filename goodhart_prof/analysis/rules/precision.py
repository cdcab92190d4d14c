"""Precision rules: GEMM/conv time spent in fp32/TF32 kernels where 16-bit would do."""
from __future__ import annotations

import re

from .base import Context, Finding, Need, Rule, Threshold

# 16-bit (or 8-bit) GEMM/conv kernels by name. CUTLASS spells the math: `h1688`/`h16816` (fp16),
# `bf16_s16816` (bf16 in, fp32 accumulate); a bare `s1688gemm`/`s16816gemm` is TF32 on fp32 data
# (sampled_128rank's A100 GEMMs), which keeps fp32's memory traffic, so it is not mixed precision.
# cuBLASLt's Hopper `nvjet_*` names carry type letters instead (s fp32, h fp16, t bf16): `nvjet_tst`
# is bf16 in/out with fp32 accumulation, `nvjet_hsh` fp16.
LOW_PRECISION = re.compile(r"bf16|f16|fp16|half|h884|h1688|h16816|hmma|e4m3|e5m2|fp8|nvjet_[ht]s[ht]",
                           re.I)


def _no_amp(ctx: Context) -> Finding | None:
    k = ctx.analysis.kernels
    if k.empty:
        return None
    mm = k[k["category"].isin(["gemm", "conv"])]
    total = ctx.kernel_total
    mm_us = float(mm["total_us"].sum())
    if total <= 0 or mm_us / total < NO_AMP.limit("gemm_conv_share"):
        return None
    half_us = float(mm[mm["name"].astype(str).str.contains(LOW_PRECISION)]["total_us"].sum())
    if half_us / mm_us >= NO_AMP.limit("low_precision_fraction"):
        return None
    return Finding(
        "no_amp", "medium",
        f"GEMM/conv kernels run in fp32 or TF32 ({100 * (1 - half_us / mm_us):.0f}% of their time)",
        {"gemm_conv_us": round(mm_us, 3), "low_precision_us": round(half_us, 3),
         "gemm_conv_share": round(mm_us / total, 4),
         "top": mm.head(3)["name"].astype(str).tolist()},
        "Run forward and loss under torch.autocast(device_type='cuda', dtype=torch.bfloat16).")


NO_AMP = Rule(
    "no_amp", "precision", _no_amp, needs=(Need.GPU,),
    thresholds={
        "gemm_conv_share": Threshold(0.10, "judged only when GEMM/conv is at least 10% of kernel "
                                           "time; below that precision is not the bottleneck"),
        "low_precision_fraction": Threshold(1 / 3, "mixed precision is on when at least a third of "
                                                    "GEMM/conv time runs in 16-bit (or 8-bit) kernels")})

RULES = (NO_AMP,)
