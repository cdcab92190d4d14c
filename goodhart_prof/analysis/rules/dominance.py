"""Dominance rules: one kernel, or one launching op, takes much of the GPU time. The finding names
the op that launched it (GPU activity -> launch call -> innermost cpu op, analysis/kernels.py
`launching_ops`) and, where a known faster path exists, which one."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...trace.model import in_categories
from ...trace.names import kernel_name
from ..kernels import gpu_with_category
from .base import Context, Finding, Need, Rule, Threshold
from .precision import amp_advice, compute_capabilities
from .savings import Saving

# Categories that never count as dominant work: a collective's duration includes the wait for the
# slowest rank (and overlaps compute), and copies have rules of their own (copies.py).
_NOT_WORK = ("communication", "memcpy", "memset")
# fp32 GEMMs by name: cuBLAS/MAGMA `sgemm`, TF32 and f32 xmma tiles, Tensile's single-precision
# `Cijk_*_S_B_*`/`*_SB_*`; not names that also carry a 16-bit type (`bf16bf16_bf16f32_f32` tiles
# accumulate in fp32 on bf16 inputs).
_FP32_GEMM = re.compile(r"sgemm|tf32|f32f32_f32|^cijk_\w*?_s_?b_")
_HALF = re.compile(r"bf16|f16|half|hgemm|fp8|e4m3|e5m2|fp4|e2m1|int8")
_SOFTMAX = re.compile(r"softmax", re.I)
# Ops of eager attention (Q K^T and P V): a softmax beside them is the middle of attention.
_EAGER_ATTENTION_OPS = ("aten::bmm", "aten::baddbmm", "aten::matmul")


def _dominant_kernel(ctx: Context) -> Finding | None:
    g = gpu_with_category(ctx.trace)
    total = float(g["dur"].sum())
    work = g[~in_categories(g["category"], _NOT_WORK)]
    if work.empty or total <= 0:
        return None
    limit = DOMINANT_KERNEL.limit("share")
    dur = work["dur"].to_numpy()
    name_codes, op_codes = work["name"].cat.codes.to_numpy(), work["op"].cat.codes.to_numpy()
    by_name, by_op = _sums_by_code(name_codes, dur), _sums_by_code(op_codes, dur)
    name_share = float(by_name.iloc[0]) / total
    op_share = float(by_op.iloc[0]) / total if len(by_op) else 0.0
    if name_share >= limit:
        subject, rows = "kernel", name_codes == by_name.index[0]
    elif op_share >= limit:
        subject, rows = "op", op_codes == by_op.index[0]
    else:
        return None
    mine = work[rows]
    top = mine.groupby("name", observed=True, sort=False)["dur"].sum().idxmax()
    kern = mine[(mine["name"] == top).to_numpy()]
    share = (name_share if subject == "kernel" else op_share)
    launchers = _launchers(kern, total)
    evidence = {
        "subject": subject, "kernel": str(top), "category": str(kern["category"].iloc[0]),
        "library": str(kern["library"].iloc[0]), "share": round(share, 4),
        "kernel_share": round(float(kern["dur"].sum()) / total, 4),
        "count": int(len(kern)), "median_us": round(float(kern["dur"].median()), 3),
        "launching_ops": launchers,
        "top_ops": _top_ops(kern, total)}
    if subject == "op":
        evidence["op"] = str(work["op"].cat.categories[by_op.index[0]])
        evidence["op_kernels"] = int(len(mine))
    fix, path, saved = _faster_path(ctx, g, kern, mine)
    evidence["faster_path"] = path
    who = evidence.get("op") or (launchers[0]["op"] if launchers else None)
    by = f" (launched by {who})" if who else " (launching op not in the trace: a CUDA graph " \
                                            "replay or a GPU-only trace)"
    what = f"{evidence['op']}'s kernels" if subject == "op" else f"one kernel, {kernel_name(top, 60)},"
    return Finding(
        "dominant_kernel", "medium" if path else "low",
        f"{what} take{'s' if subject == 'kernel' else ''} {share:.0%} of GPU time{by}",
        evidence, fix, **DOMINANT_KERNEL.estimated(
            None if saved is None
            else ctx.per_iteration(saved, ctx.trace.gpu.loc[mine.index, "rank"].unique()),
            "batching saves launches and tail effects the trace cannot price" if path else
            "no faster path is known for this work: the finding says where the time goes, not "
            "how much a change would save"))


def _sums_by_code(codes: np.ndarray, dur: np.ndarray) -> pd.Series:
    """Total duration per categorical code (code -1, a missing value, left out), most first;
    groups in order of first appearance, so ties keep that order (as a groupby by value)."""
    known = codes >= 0
    return pd.Series(dur[known]).groupby(codes[known], sort=False).sum().sort_values(
        ascending=False, kind="stable")


def _launchers(kern: pd.DataFrame, total: float, top: int = 3) -> list[dict]:
    ops = kern["op"].astype(object).where(kern["op"].notna(), None)
    sums = kern.groupby(ops.to_numpy(), dropna=True, sort=False)["dur"].agg(["sum", "size"])
    sums = sums.sort_values("sum", ascending=False, kind="stable").head(top)
    return [{"op": str(o), "share": round(float(r["sum"]) / total, 4), "count": int(r["size"])}
            for o, r in sums.iterrows()]


def _top_ops(kern: pd.DataFrame, total: float, top: int = 3) -> list[dict]:
    ops = kern["top_op"].astype(object).where(kern["top_op"].notna(), None)
    sums = kern.groupby(ops.to_numpy(), dropna=True, sort=False)["dur"].sum()
    sums = sums.sort_values(ascending=False, kind="stable").head(top)
    return [{"op": str(o), "share": round(float(s) / total, 4)} for o, s in sums.items()]


def _faster_path(ctx: Context, g: pd.DataFrame, kern: pd.DataFrame,
                 mine: pd.DataFrame) -> tuple[str, str | None, float | None]:
    """The fix text, the name of the faster path (None: none known, just named) and the GPU
    time it would save over the trace (DOMINANT_KERNEL's saving; None without a path)."""
    name = str(kern["name"].iloc[0])
    if _SOFTMAX.search(name) and g["op"].isin(_EAGER_ATTENTION_OPS).any():
        return ("A standalone softmax between batched matmuls is eager attention: use the fused "
                "torch.nn.functional.scaled_dot_product_attention (flash / memory-efficient "
                "kernels), which never writes the attention matrix to memory.", "sdpa",
                float(kern["dur"].sum()))
    gemm = mine[(mine["category"] == "gemm").to_numpy()]
    if not gemm.empty:
        names = pd.Series(gemm["name"].astype(str).unique())
        fp32 = names.str.lower().map(lambda n: bool(_FP32_GEMM.search(n)) and not _HALF.search(n))
        if fp32.any():
            slow = gemm[gemm["name"].astype(str).isin(set(names[fp32.to_numpy()]))]
            caps = compute_capabilities(ctx)
            text = ("These GEMMs run in fp32. " + amp_advice(caps) if caps else
                    "These GEMMs run in fp32: run the model under torch.autocast(dtype="
                    "torch.bfloat16) (float16 on GPUs without bf16), or at least allow TF32 "
                    "(torch.set_float32_matmul_precision('high')).")
            if caps and min(caps)[0] >= 8:
                text += " At least allow TF32 (torch.set_float32_matmul_precision('high'))."
            return (text, "bf16_autocast",
                    float(slow["dur"].sum()) / 2)
        per_it = len(gemm) / ctx.iterations
        if (per_it >= DOMINANT_KERNEL.limit("many_gemms")
                and float(gemm["dur"].median()) < DOMINANT_KERNEL.limit("tiny_gemm_us")):
            return ("Thousands of tiny GEMMs: batch them (torch.bmm over stacked operands, a "
                    "grouped GEMM such as torch._grouped_mm, or torch.compile to fuse them).",
                    "batch_gemms", None)
    return ("Most GPU time goes to this work: it is where optimization pays off (look at its "
            "shapes and dtype, or whether it needs to run this often).", None, None)


DOMINANT_KERNEL = Rule(
    "dominant_kernel", "dominance", _dominant_kernel, needs=(Need.GPU,),
    thresholds={
        "share": Threshold(0.25, "one kernel (or one op's kernels) taking a quarter of all GPU "
                                 "time sets the step time: a change there is worth more than any "
                                 "other"),
        "many_gemms": Threshold(1000, "a thousand GEMM launches per iteration for one op is a "
                                      "loop over small matrices"),
        "tiny_gemm_us": Threshold(20.0, "a GEMM under 20 us (median) is dominated by launch and "
                                        "tail effects, not math")},
    saving=Saving("by faster path, per iteration: eager-attention softmax -> the softmax kernel's "
                  "time; fp32 GEMMs -> half their time; others none",
                  "fused attention never writes or reads the attention matrix, the softmax's whole "
                  "cost; 16-bit GEMMs run at least twice as fast; batching tiny GEMMs saves launches "
                  "the trace cannot price"))

RULES = (DOMINANT_KERNEL,)
