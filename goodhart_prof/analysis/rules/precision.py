"""Precision rules: GEMM/conv time spent in fp32/TF32 kernels where 16-bit would do.

The precision of each GEMM/conv kernel comes from analysis/gpu/precision.py: the launching op's
`Input type` when the trace recorded shapes, else the types the kernel's name spells, else
unknown. Unknown time is never counted as fp32: a trace whose GEMM/conv time is mostly of
unknown precision is not judged.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..intervals import group_totals, sorted_rows
from ..gpu.precision import FULL_PRECISION, LOW_PRECISION, kernel_precision, precision_summary
from .base import Context, Need, Rule, Threshold
from .finding import Finding
from .savings import Saving

TOP_KERNELS = 5


def _no_amp(ctx: Context) -> Finding | None:
    if not fp16_gains(compute_capabilities(ctx)):
        return None  # no GPU here runs 16-bit math faster than fp32: autocast saves nothing
    table = kernel_precision(ctx.trace)
    total = ctx.kernel_total
    # on the columns' arrays (sums as pandas sums a column: NaN skipped, pairwise)
    dur, dtype = table["dur"].to_numpy(float), table["dtype"].to_numpy(object)
    mm_us = float(np.nansum(dur)) if len(table) else 0.0
    if total <= 0 or mm_us <= 0 or mm_us / total < NO_AMP.limit("gemm_conv_share"):
        return None
    known = dtype != "unknown"
    known_us = float(np.nansum(dur[known]))
    if known_us / mm_us < NO_AMP.limit("known_fraction"):
        return None  # most GEMM/conv time is of unknown precision: the rule cannot judge
    low, full = known & np.isin(dtype, LOW_PRECISION), known & np.isin(dtype, FULL_PRECISION)
    low_us, full_us = float(np.nansum(dur[low])), float(np.nansum(dur[full]))
    if full_us <= 0 or low_us / known_us >= NO_AMP.limit("low_precision_fraction"):
        return None
    ev = ctx.trace.events
    ranks = pd.unique(ev["rank"].to_numpy()[ev.index.get_indexer(table["gpu_row"].to_numpy()[full])])
    return Finding(
        "no_amp", "medium",
        f"GEMM/conv kernels run in fp32 or TF32 ({100 * full_us / known_us:.0f}% of the GEMM/conv "
        f"time whose precision is known)",
        {"gemm_conv_us": round(mm_us, 3), "low_precision_us": round(low_us, 3),
         "full_precision_us": round(full_us, 3), "unknown_us": round(mm_us - known_us, 3),
         "gemm_conv_share": round(mm_us / total, 4),
         "by_dtype": _by_dtype(table), "top": _top_kernels(table)},
        _amp_fix(ctx), **NO_AMP.estimated(ctx.per_iteration(full_us / 2, ranks)))


def compute_capabilities(ctx: Context) -> list[tuple[int, int]]:
    """(major, minor) of each GPU deviceProperties lists; minor 0 where it is not recorded."""
    out = []
    for props in ctx.trace.device_properties.values():
        for p in props:
            if isinstance(p, dict) and isinstance(p.get("computeMajor"), int):
                minor = p.get("computeMinor")
                out.append((p["computeMajor"], minor if isinstance(minor, int) else 0))
    return out


def fp16_gains(capabilities: list[tuple[int, int]]) -> bool:
    """Whether 16-bit GEMMs run faster than fp32 on every one of these GPUs (judged on the oldest):
    from compute capability 7.0 (tensor cores), and on GP100/GP10B (6.0, 6.2: packed half2 math at
    twice the fp32 rate); not on 6.1 (GP102/GP104: fp16 at a fraction of fp32) nor below 6.0.
    True where no capability is recorded (most traces come from GPUs that gain)."""
    if not capabilities:
        return True
    oldest = min(capabilities)
    return oldest >= (7, 0) or oldest in ((6, 0), (6, 2))


def amp_advice(capabilities: list[tuple[int, int]]) -> str:
    """Which 16-bit type to autocast to on these GPUs, judged on the oldest one (the advice must
    hold on each): tensor cores start at compute capability 7.0 (Volta, fp16 only), bf16 at 8.0
    (Ampere; AMD Instinct reports 9). Below 7.0 only GP100 (6.0, 6.2) runs fp16 faster than fp32:
    twice, through packed half2 math."""
    if not capabilities:
        return ("Run forward and loss under torch.autocast(device_type='cuda', dtype=torch.bfloat16) "
                "(float16 with a GradScaler on GPUs without bf16, such as V100 or T4).")
    major, minor = min(capabilities)
    cc = f"compute capability {major}.{minor}"
    if major >= 8:
        return ("Run forward and loss under torch.autocast(device_type='cuda', dtype=torch.bfloat16): "
                f"these GPUs ({cc}) have bf16 and fp16 tensor cores.")
    fp16 = ("Run forward and loss under torch.autocast(device_type='cuda', dtype=torch.float16) "
            "with a torch.amp.GradScaler for training")
    if major == 7:
        return (f"{fp16}: these GPUs ({cc}) have fp16 tensor cores; bf16 needs compute "
                "capability 8.0 or newer.")
    none = (f"these GPUs ({cc}) have no tensor cores (they start at compute capability 7.0, "
            "Volta) and no bf16 (8.0 or newer)")
    if fp16_gains(capabilities):
        return (f"{fp16}: {none}, but run fp16 math at twice the fp32 rate (packed half2), so "
                "16-bit GEMMs gain up to 2x, not tensor-core speed.")
    return (f"Autocast would not help here: {none}, and their fp16 math is no faster than fp32; "
            "these GEMMs speed up on a GPU of compute capability 7.0 or newer.")


def _amp_fix(ctx: Context) -> str:
    return amp_advice(compute_capabilities(ctx))


def _by_dtype(table: pd.DataFrame) -> dict[str, dict]:
    """dtype -> its GEMM/conv time and that time per source (op_input_type, kernel_name, unknown)."""
    out: dict[str, dict] = {}
    summary = precision_summary(table)
    for dtype, source, total_us in zip(*(summary[c].tolist() for c in ("dtype", "source", "total_us"))):
        entry = out.setdefault(dtype, {"total_us": 0.0, "sources": {}})
        entry["total_us"] = round(entry["total_us"] + float(total_us), 3)
        entry["sources"][source] = round(float(total_us), 3)
    return out


def _top_kernels(table: pd.DataFrame) -> list[dict]:
    """The GEMM/conv kernels with the most time, each with its dtype, source and launching op."""
    grouped = group_totals(table, ["name", "dtype", "source", "op"])
    grouped = sorted_rows(grouped, ["total_us", "name"], [False, True])
    top = grouped.head(TOP_KERNELS)
    return [{"name": name, "dtype": dtype, "source": source, "op": op, "count": int(count),
             "total_us": round(float(total_us), 3)}
            for name, dtype, source, op, count, total_us in
            zip(*(top[c].tolist() for c in ("name", "dtype", "source", "op", "count", "total_us")))]


NO_AMP = Rule(
    "no_amp", "precision", _no_amp, needs=(Need.GPU,),
    thresholds={
        "gemm_conv_share": Threshold(0.10, "judged only when GEMM/conv is at least 10% of kernel "
                                           "time; below that precision is not the bottleneck"),
        "known_fraction": Threshold(0.5, "judged only when the precision of at least half of the "
                                         "GEMM/conv time is known (from the launching op's input "
                                         "types or the kernel name): unknown time is not fp32"),
        "low_precision_fraction": Threshold(1 / 3, "mixed precision is on when at least a third of "
                                                    "GEMM/conv time of known precision runs in "
                                                    "16-bit (or 8/4-bit) kernels")},
    saving=Saving("half the fp32/TF32 GEMM/conv kernel time per iteration (the rule does not fire "
                  "where the oldest GPU's 16-bit math is no faster than fp32: compute capability "
                  "6.1 or below 6.0, see fp16_gains)",
                  "16-bit tensor cores run at twice TF32's peak and several times fp32's, and "
                  "move half the bytes: at least half that time goes (the iteration shortens by "
                  "as much where the GPU is what it waits for)"))

RULES = (NO_AMP,)
