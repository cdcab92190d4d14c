"""Findings: rules that turn the analyses into advice, each fired only on evidence in the trace.

Every rule names its threshold next to it, with the reason for that number. A rule returns at
most one `Finding`; `evidence` holds the numbers (and sites) that made it fire.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd

SEVERITIES = ("high", "medium", "low")


@dataclass
class Finding:
    rule: str
    severity: str
    title: str
    evidence: dict[str, Any]
    fix: str

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "title": self.title,
                "evidence": self.evidence, "fix": self.fix}


# -- helpers --------------------------------------------------------------------------------------
def _iterations(a) -> int:
    """Traced iterations (ProfilerStep#N annotations), at least 1 so rates stay finite."""
    ph = a.phases
    if ph is None or ph.empty or "kind" not in ph:
        return 1
    steps = ph[ph["kind"] == "iteration"]
    return max(1, int(steps["iteration"].nunique())) if not steps.empty else 1


def _top_sites(points: pd.DataFrame, n: int = 3) -> list[dict[str, Any]]:
    if points.empty:
        return []
    grouped = points.groupby("site", observed=True).agg(count=("kind", "size"), total_us=("dur", "sum"))
    grouped = grouped.sort_values(["count", "total_us"], ascending=False).head(n)
    return [{"site": s, "count": int(r["count"]), "total_us": round(float(r["total_us"]), 3)}
            for s, r in grouped.iterrows()]


def _kind(a, kind: str) -> pd.DataFrame:
    sp = a.sync_points
    return sp[sp["kind"] == kind] if not sp.empty else sp


def _names_matching(names: pd.Series, pattern) -> pd.Series:
    """Boolean mask of a categorical name column, matching each distinct name once."""
    cats = pd.Series(names.cat.categories.astype(str))
    hit = cats.str.contains(pattern).to_numpy()
    codes = names.cat.codes.to_numpy()
    return pd.Series(hit[codes] & (codes >= 0), index=names.index)


def _kernel_total(a) -> float:
    return float(a.categories["total_us"].sum()) if not a.categories.empty else 0.0


# -- rules ------------------------------------------------------------------------------------------
# .item() is fine once per iteration (metrics moved once); 2+ per traced iteration means a
# per-step read-back, the pattern that cost the grid-world trainer half its speed.
ITEM_PER_ITERATION = 2.0


def item_logging(a) -> Finding | None:
    items = _kind(a, "item")
    per_it = len(items) / _iterations(a)
    if per_it < ITEM_PER_ITERATION:
        return None
    return Finding(
        "item_logging", "high" if per_it >= 10 else "medium",
        f".item() reads a tensor back to the host {per_it:.1f} times per iteration",
        {"count": int(len(items)), "per_iteration": round(per_it, 2),
         "wait_us": round(float(items["dur"].sum()), 3), "sites": _top_sites(items)},
        "Keep metrics on the device (stack them into one tensor), copy to the host once per "
        "iteration with non_blocking=True, and convert in a logging thread.")


# Any nonzero in a traced iteration is a full host sync with a data-dependent shape; NaN/mask
# validation in the forward pass is the usual source, so one per iteration already fires.
NONZERO_PER_ITERATION = 1.0


def nan_checks(a) -> Finding | None:
    nz = _kind(a, "nonzero")
    per_it = len(nz) / _iterations(a)
    if per_it < NONZERO_PER_ITERATION:
        return None
    return Finding(
        "nan_checks", "high" if per_it >= 5 else "medium",
        f"nonzero (boolean masks, torch.where(cond), isnan().any() checks) syncs {per_it:.1f} "
        "times per iteration",
        {"count": int(len(nz)), "per_iteration": round(per_it, 2),
         "wait_us": round(float(nz["dur"].sum()), 3), "sites": _top_sites(nz)},
        "Put NaN/shape validation behind a debug flag; use torch.where(cond, a, b) or "
        "masked arithmetic instead of boolean indexing in the hot path.")


# `if tensor:` in the update: one per iteration already breaks compiled graphs.
def branchy_value_head(a) -> Finding | None:
    br = _kind(a, "is_nonzero")
    per_it = len(br) / _iterations(a)
    if per_it < 1.0:
        return None
    return Finding(
        "branchy_value_head", "medium",
        f"Python branches on tensor values (`if tensor:`) sync {per_it:.1f} times per iteration",
        {"count": int(len(br)), "per_iteration": round(per_it, 2), "sites": _top_sites(br)},
        "Replace the branch with torch.where or give both variants one interface (e.g. value "
        "heads with the same methods), so the hot path is straight-line code.")


# Pageable HtoD copies block the host while the driver stages them. More than 1 per iteration
# or more than 1% of GPU time is worth pinning or building the data on the device.
PAGEABLE_PER_ITERATION = 1.0
PAGEABLE_SHARE = 0.01


def pageable_htod(a) -> Finding | None:
    pg = _kind(a, "memcpy_htod_pageable")
    if pg.empty:
        return None
    gpu = a.trace.gpu
    copies = gpu[_names_matching(gpu["name"], r"^Memcpy HtoD \(Pageable")]
    copy_us = float(copies["dur"].sum())
    per_it = len(pg) / _iterations(a)
    share = copy_us / max(float(a.gpu["busy_us"].sum()), 1e-9) if not a.gpu.empty else 0.0
    if per_it < PAGEABLE_PER_ITERATION and share < PAGEABLE_SHARE:
        return None
    return Finding(
        "pageable_htod", "high" if share >= 0.05 else "medium",
        f"{len(pg)} pageable host-to-device copies ({per_it:.1f} per iteration, "
        f"{copy_us / 1000:.2f} ms on the GPU)",
        {"count": int(len(pg)), "per_iteration": round(per_it, 2), "copy_us": round(copy_us, 3),
         "bytes": float(copies["bytes"].sum(skipna=True)), "gpu_share": round(share, 4),
         "sites": _top_sites(pg)},
        "Create the data on the device, or copy from pinned memory (tensor.pin_memory()) "
        "with non_blocking=True.")


# Small HtoD copies of freshly created CPU tensors (`torch.zeros(n)` then `.to(device)`): many
# tiny transfers per iteration. Tiny = under 64 KiB; 2+ per iteration fires.
SMALL_COPY_BYTES = 64 * 1024
SMALL_COPIES_PER_ITERATION = 2.0


def cpu_alloc(a) -> Finding | None:
    gpu = a.trace.gpu
    if gpu.empty:
        return None
    htod = gpu[_names_matching(gpu["name"], r"^Memcpy HtoD")]
    small = htod[htod["bytes"].fillna(0) < SMALL_COPY_BYTES]
    per_it = len(small) / _iterations(a)
    if per_it < SMALL_COPIES_PER_ITERATION:
        return None
    return Finding(
        "cpu_alloc", "medium",
        f"{per_it:.1f} small host-to-device copies per iteration: tensors made on the CPU, then moved",
        {"count": int(len(small)), "per_iteration": round(per_it, 2),
         "bytes_median": float(small["bytes"].median()) if small["bytes"].notna().any() else None,
         "copy_us": round(float(small["dur"].sum()), 3)},
        "Pass device= when creating tensors (torch.zeros(n, device=dev)) or preallocate them "
        "once outside the loop.")


_FUSED_OPT = re.compile(r"fused_adam|FusedAdam|_fused_adamw?_|fused_sgd", re.I)
_OPT_STEP = re.compile(r"^Optimizer\.step#")
# A fused Adam launches a handful of kernels per step; foreach/for-loop Adam launches several per
# parameter tensor. 20+ kernels per optimizer step with no fused kernel fires.
UNFUSED_KERNELS_PER_STEP = 20


def unfused_adam(a) -> Finding | None:
    ph = a.phases
    if ph.empty or a.trace.gpu.empty:
        return None
    steps = ph[ph["name"].astype(str).str.match(_OPT_STEP) & (ph["kind"] == "annotation")]
    if steps.empty:
        return None
    names = pd.Series(a.trace.events["name"].cat.categories.astype(str))
    if names.str.contains(_FUSED_OPT).any():
        return None
    kernels = int(steps["gpu_kernels"].sum()) if "gpu_kernels" in steps else None
    calls = int(steps["count"].sum())
    per_step = kernels / calls if kernels is not None and calls else None
    if per_step is not None and per_step < UNFUSED_KERNELS_PER_STEP:
        return None
    return Finding(
        "unfused_adam", "medium",
        "the optimizer step is not fused: many small kernels per step",
        {"optimizer_steps": calls, "kernels_per_step": None if per_step is None else round(per_step, 1),
         "gpu_us": round(float(steps["gpu_us"].sum()), 3), "cpu_us": round(float(steps["cpu_us"].sum()), 3)},
        "torch.optim.Adam(params, fused=True) (CUDA), with the learning rate as a device tensor.")


_LOW_PRECISION = re.compile(r"bf16|f16|fp16|half|h884|h1688|h16816|s1688|s16816|hmma|e4m3|e5m2|fp8", re.I)
# Mixed precision is on when at least a third of GEMM/conv time runs in 16-bit (or 8-bit) kernels;
# only judged when GEMM/conv is at least 10% of kernel time, else precision is not the bottleneck.
AMP_MIN_SHARE = 0.10
AMP_HALF_FRACTION = 1 / 3


def no_amp(a) -> Finding | None:
    k = a.kernels
    if k.empty:
        return None
    mm = k[k["category"].isin(["gemm", "conv"])]
    total = _kernel_total(a)
    mm_us = float(mm["total_us"].sum())
    if total <= 0 or mm_us / total < AMP_MIN_SHARE:
        return None
    half_us = float(mm[mm["name"].astype(str).str.contains(_LOW_PRECISION)]["total_us"].sum())
    if half_us / mm_us >= AMP_HALF_FRACTION:
        return None
    return Finding(
        "no_amp", "medium",
        f"GEMM/conv kernels run in fp32 ({100 * (1 - half_us / mm_us):.0f}% of their time)",
        {"gemm_conv_us": round(mm_us, 3), "low_precision_us": round(half_us, 3),
         "gemm_conv_share": round(mm_us / total, 4),
         "top": mm.head(3)["name"].astype(str).tolist()},
        "Run forward and loss under torch.autocast(device_type='cuda', dtype=torch.bfloat16).")


# Launch-bound: the GPU mostly waits (utilization under 50%) while kernels are tiny (median under
# 10 us) and most idle gaps are short launch gaps or host waits.
LAUNCH_UTIL = 0.5
LAUNCH_MEDIAN_US = 10.0


def launch_bound(a) -> Finding | None:
    gpu = a.trace.gpu
    kernels = gpu[gpu["cat"] == "kernel"]
    if len(kernels) < 100 or a.gpu.empty:
        return None
    util = float(a.gpu["busy_us"].sum() / max(a.gpu["span_us"].sum(), 1e-9))
    median = float(kernels["dur"].median())
    if util >= LAUNCH_UTIL or median >= LAUNCH_MEDIAN_US:
        return None
    return Finding(
        "launch_bound", "high",
        f"launch-bound: {len(kernels):,} kernels with a median of {median:.1f} us, GPU busy {100 * util:.0f}%",
        {"kernels": int(len(kernels)), "median_kernel_us": round(median, 3),
         "utilization": round(util, 4)},
        "Give each kernel more work (more envs per batch), fuse with torch.compile, and replay "
        "fixed-shape steps with CUDA graphs (mode='reduce-overhead').")


# Low utilization: under 60% busy, or a quarter of the timeline in windows under 20% busy.
LOW_UTIL = 0.6
LOW_WINDOW = 0.2
LOW_WINDOW_FRACTION = 0.25


def low_utilization(a) -> Finding | None:
    worst = None
    for b in a.burstiness:
        row = a.gpu[(a.gpu["rank"] == b.rank) & (a.gpu["device"] == b.device)]
        if row.empty or len(b.window_util) == 0:
            continue
        util = float(row["utilization"].iloc[0])
        low = float(np.mean(np.asarray(b.window_util) < LOW_WINDOW))
        if util < LOW_UTIL or low >= LOW_WINDOW_FRACTION:
            if worst is None or util < worst[0]:
                worst = (util, low, b, row)
    if worst is None:
        return None
    util, low, b, row = worst
    gaps = b.gaps or {}
    return Finding(
        "low_utilization", "high" if util < 0.3 else "medium",
        f"GPU {b.device} (rank {b.rank}) is busy {100 * util:.0f}% of its span",
        {"rank": b.rank, "device": b.device, "utilization": round(util, 4),
         "low_window_fraction": round(low, 4), "idle_us": round(float(row["idle_us"].iloc[0]), 3),
         "gaps": {k: gaps.get(k) for k in ("count", "p50_us", "p99_us", "max_us", "total_us")},
         "gap_classes": gaps.get("by_class")},
        "Find what the GPU waits for in the gap classes: host_wait means the CPU is late "
        "(syncs, Python overhead, data on the host); launch means too many tiny kernels.")


# A scatter/gather kernel category over a quarter of kernel time, or the top kernel being one
# with over 20%, is the pattern that dominated the PPO report (scatter_gather 37%).
SCATTER_SHARE = 0.25
SCATTER_TOP_SHARE = 0.20


def dominant_scatter_gather(a) -> Finding | None:
    total = _kernel_total(a)
    if total <= 0 or a.categories.empty:
        return None
    cat = a.categories.set_index("category")["total_us"]
    share = float(cat.get("scatter_gather", 0.0)) / total
    top = a.kernels.iloc[0] if not a.kernels.empty else None
    top_share = float(top["total_us"]) / total if top is not None else 0.0
    if share < SCATTER_SHARE and not (top is not None and top["category"] == "scatter_gather"
                                      and top_share >= SCATTER_TOP_SHARE):
        return None
    return Finding(
        "dominant_scatter_gather", "medium",
        f"scatter/gather kernels take {100 * share:.0f}% of kernel time",
        {"share": round(share, 4), "top_kernel": str(top["name"]) if top is not None else None,
         "top_kernel_share": round(top_share, 4)},
        "Gather once into contiguous tensors (index_select on a flat view), avoid advanced "
        "indexing in inner loops, or let torch.compile fuse the indexing.")


_COMPILED = re.compile(r"Torch-Compiled Region|CompiledFunction|triton_", re.I)
_BACKWARD = re.compile(r"autograd::engine|Backward", re.I)
# Eager update: the trace trains (backward ops present) on a GPU with 50+ kernels but shows no
# compiled region and no Triton kernel.
EAGER_MIN_KERNELS = 50


def eager_update(a) -> Finding | None:
    gpu = a.trace.gpu
    if len(gpu) < EAGER_MIN_KERNELS:
        return None
    names = pd.Series(a.trace.events["name"].cat.categories.astype(str))
    if not names.str.contains(_BACKWARD).any() or names.str.contains(_COMPILED).any():
        return None
    return Finding(
        "eager_update", "low",
        "the update runs eagerly: no compiled region or Triton kernel in a training trace",
        {"kernels": int(len(gpu)), "backward_ops": int(names.str.contains(_BACKWARD).sum())},
        "torch.compile the loss/update function (warm it up before timing) to fuse elementwise "
        "chains into a few Triton kernels.")


RULES: tuple[Callable, ...] = (item_logging, nan_checks, branchy_value_head, pageable_htod, cpu_alloc,
                               unfused_adam, no_amp, launch_bound, low_utilization,
                               dominant_scatter_gather, eager_update)


def findings(a) -> list[Finding]:
    found = [f for rule in RULES if (f := rule(a)) is not None]
    return sorted(found, key=lambda f: SEVERITIES.index(f.severity))
