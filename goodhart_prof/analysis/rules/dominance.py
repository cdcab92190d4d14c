"""Dominance rules: one kernel, or one launching op, takes much of the GPU time. The finding names
the op that launched it (GPU activity -> launch call -> innermost cpu op, analysis/gpu/kernels.py
`launching_ops`) and, where a known faster path exists, which one (rules/dominance_advice.py)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...trace.model import in_categories
from ...trace.names import kernel_name
from ..gpu.kernels import gpu_with_category
from .base import Context, Need, Rule, Threshold
from .finding import Finding
from .dominance_advice import faster_path
from .savings import Saving

# Categories that never count as dominant work: a collective's duration includes the wait for the
# slowest rank (and overlaps compute), and copies have rules of their own (copies.py).
_NOT_WORK = ("communication", "memcpy", "memset")


def _dominant_kernel(ctx: Context) -> Finding | None:
    g = gpu_with_category(ctx.trace)
    total = float(g["dur"].sum())
    keep = ~in_categories(g["category"], _NOT_WORK)
    if not keep.any() or total <= 0:
        return None
    limit = DOMINANT_KERNEL.limit("share")
    dur = g["dur"].to_numpy()[keep]  # the work's columns read; its rows taken once it dominates
    name_codes, op_codes = g["name"].cat.codes.to_numpy()[keep], g["op"].cat.codes.to_numpy()[keep]
    by_name, by_op = _sums_by_code(name_codes, dur), _sums_by_code(op_codes, dur)
    name_share = float(by_name.iloc[0]) / total
    op_share = float(by_op.iloc[0]) / total if len(by_op) else 0.0
    if name_share >= limit:
        subject, rows = "kernel", name_codes == by_name.index[0]
    elif op_share >= limit:
        subject, rows = "op", op_codes == by_op.index[0]
    else:
        return None
    work = g[keep]
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
    advice = faster_path(ctx, DOMINANT_KERNEL, g, kern, mine)
    evidence["faster_path"] = advice.path
    evidence.update(advice.evidence or {})
    who = evidence.get("op") or (launchers[0]["op"] if launchers else None)
    by = f" (launched by {who})" if who else " (launching op not in the trace: a CUDA graph " \
                                            "replay or a GPU-only trace)"
    what = f"{evidence['op']}'s kernels" if subject == "op" else f"one kernel, {kernel_name(top, 60)},"
    return Finding(
        "dominant_kernel", "medium" if advice.path else "low",
        f"{what} take{'s' if subject == 'kernel' else ''} {share:.0%} of GPU time{by}",
        evidence, advice.fix, **DOMINANT_KERNEL.estimated(
            None if advice.saved_us is None
            else ctx.per_iteration(advice.saved_us, ctx.trace.gpu.loc[mine.index, "rank"].unique()),
            advice.why_none))


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
                  "the trace cannot price; channels_last removes the layout transposes, but what "
                  "the convolutions then cost is not in the trace"))

RULES = (DOMINANT_KERNEL,)
