"""Utilization rules: a GPU that waits, on launches (tiny kernels) or on the host, and a timeline
dominated by scatter/gather kernels."""
from __future__ import annotations


import numpy as np
import pandas as pd

from ..gpu.idle import OTHER
from ..gpu.graph_capture import capture_count, captured_us
from .base import Context, Need, Rule, Threshold
from .finding import Finding, NotJudged
from .idle_advice import (GENERIC_FIX, compiled_first, compiled_fix, compiled_note, idle_fix, short_cause,
                          with_frame)
from .savings import Saving
from ...units import ms_text


def _tiny_batch(ctx: Context) -> Finding | None:
    a, gpu = ctx.analysis, ctx.trace.gpu
    kernels = pd.Series(gpu["dur"].to_numpy()[(gpu["cat"] == "kernel").to_numpy()])  # their durations
    if len(kernels) < TINY_BATCH.limit("min_kernels") or a.gpu.empty:
        return None
    util = float(a.gpu["busy_us"].sum() / max(a.gpu["span_us"].sum(), 1e-9))
    median = float(kernels.median())
    if util >= TINY_BATCH.limit("utilization") or median >= TINY_BATCH.limit("median_kernel_us"):
        return None
    captured = _captured(ctx)
    if captured is not None:
        return NotJudged("tiny_batch", captured)
    short = TINY_BATCH.limit("short_gap_us")
    gap_us = sum(float(dur[dur < short].sum()) for dur in (b.gap_dur for b in a.burstiness))
    all_gaps = sum(float(np.sum(b.gap_dur)) for b in a.burstiness)
    if all_gaps > 0 and gap_us / all_gaps < TINY_BATCH.limit("short_gap_share"):
        return None  # the GPU waits on something longer than launches: low_utilization names it
    return Finding(
        "tiny_batch", "medium",
        f"launch-bound: {len(kernels):,} kernels with a median of {median:.1f} us, GPU busy {100 * util:.0f}%",
        {"kernels": int(len(kernels)), "median_kernel_us": round(median, 3),
         "utilization": round(util, 4), "short_gaps_us": round(gap_us, 3)},
        "Give each kernel more work (larger batches: more samples or envs per step), fuse with "
        "torch.compile, and replay "
        "fixed-shape steps with CUDA graphs (mode='reduce-overhead').",
        **TINY_BATCH.estimated(ctx.per_iteration(gap_us, [b.rank for b in a.burstiness])))


# Launch-bound: the GPU mostly waits while its kernels are tiny. That is what too small a batch
# (too few envs) looks like: each kernel has too little work to cover its own launch.
TINY_BATCH = Rule(
    "tiny_batch", "utilization", _tiny_batch, needs=(Need.GPU,),
    thresholds={
        "utilization": Threshold(0.5, "the GPU waits more than it works"),
        "median_kernel_us": Threshold(10.0, "a median kernel under 10 us is about the cost of "
                                            "launching one"),
        "min_kernels": Threshold(100, "fewer kernels is no steady state"),
        "short_gap_us": Threshold(100.0, "a gap under 100 us between kernels is a launch or a "
                                         "few Python ops: what CUDA graphs and fusion remove; "
                                         "longer ones are the host doing other work"),
        "short_gap_share": Threshold(0.5, "launch-bound only when those short gaps are at least "
                                          "half of the GPU's idle time; otherwise it mostly waits "
                                          "on something longer (a blocking copy, the host's own "
                                          "work), which low_utilization names")},
    saving=Saving("the GPU's idle time in gaps under 100 us between its activities, per iteration",
                  "replayed as a CUDA graph (or fused) the kernels run back to back: the launch "
                  "gaps go, the long waits for the host stay"))


def _low_utilization(ctx: Context) -> Finding | None:
    a = ctx.analysis
    worst = None
    # each device's row of a.gpu, looked up once (a mask per device was quadratic in devices)
    at = {k: i for i, k in reversed(list(enumerate(zip(a.gpu["rank"].tolist(), a.gpu["device"].tolist()))))}
    # plain floats per device, the row of the worst only (a pandas row per device cost ~60 us);
    # within the steps' bounds where the rank has steps (gpu_time: host work before a step's
    # first kernel is idle there), else first to last activity
    utilization, idle = (_judged(a.gpu, c) for c in ("utilization", "idle_us"))
    low_window, low_util, low_fraction = (LOW_UTILIZATION.limit(k) for k in
                                          ("low_window", "utilization", "low_window_fraction"))
    skipped = None
    for b in a.burstiness:
        i = at.get((b.rank, b.device))
        if i is None or len(b.window_util) == 0:
            continue
        util = float(utilization[i])
        low = float(np.mean(np.asarray(b.window_util) < low_window))
        if util < low_util or low >= low_fraction:
            captured = _captured(ctx, b.rank, float(a.gpu["first_ts"].iloc[i]),
                                 float(a.gpu["last_end"].iloc[i]), float(idle[i]))
            if captured is not None:  # its idle time is graph capture's: not judged
                skipped = captured
            elif worst is None or util < worst[0]:
                worst = (util, low, b, i)
    if worst is None:
        return NotJudged("low_utilization", skipped) if skipped else None
    util, low, b, i = worst
    row = a.gpu.iloc[i:i + 1]
    gaps = b.gaps or {}
    causes = [c for c in b.idle_causes if c["cause"] != OTHER]
    causes = compiled_first(causes)
    top = causes[0] if causes and causes[0]["share"] >= LOW_UTILIZATION.limit("cause_share") else None
    in_steps = bool(np.isfinite(row["step_utilization"].to_numpy(float)[0]))
    where = "its steps" if in_steps else "its span"
    title = f"GPU {b.device} (rank {b.rank}) is busy {100 * util:.0f}% of {where}"
    if top is not None:
        title = (f"GPU idle {100 * (1 - util):.0f}%{' of its steps' if in_steps else ''}: the host is in "
                 f"{_said(top)} ({100 * top['share']:.0f}% of idle time)")
        if "group" in top:
            title = (f"GPU idle {100 * (1 - util):.0f}%{' of its steps' if in_steps else ''}: the host "
                     f"launches torch.compile'd code kernel by kernel ({100 * top['share']:.0f}% of idle "
                     f"time, in {', '.join(top['group']['functions'])})")
    idle_us = float(idle[i])
    explained = top["idle_us"] if top is not None else idle_us
    return Finding(
        "low_utilization", "medium",
        title,
        {"rank": b.rank, "device": b.device, "utilization": round(util, 4),
         "bounds": ("the steps: each from its host start to its end or its last GPU activity" if in_steps
                    else "first to last GPU activity (no iterations)"),
         **({"span_utilization": round(float(row["utilization"].iloc[0]), 4)} if in_steps else {}),
         "low_window_fraction": round(low, 4), "idle_us": round(idle_us, 3),
         "gaps": {k: gaps.get(k) for k in ("count", "p50_us", "p99_us", "max_us", "total_us")},
         "gap_classes": gaps.get("by_class"),
         "idle_causes": [{"cause": c["cause"], "idle_us": round(c["idle_us"], 3),
                          "share": round(c["share"], 4), "frame": c.get("frame"),
                          **({"kind": c["kind"], "context": c["context"]} if "kind" in c else {})}
                         for c in b.idle_causes[:3]],
         **({"compiled_code": top["group"]} if top is not None and "group" in top else {})},
        _fix(top),
        est_saving_us=ctx.per_iteration(explained, [b.rank]),
        saving_note=(compiled_note(len(ctx.trace.frames) > 0) if top is not None and "group" in top else
                     f"the GPU's idle time while the host is in {_said(top)}, per "
                     "iteration" if top is not None else
                     "the GPU's whole idle time per iteration (no single cause: an upper bound)"))


def _captured(ctx: Context, rank: "int | None" = None, lo: float = -np.inf, hi: float = np.inf,
              idle_us: "float | None" = None) -> "str | None":
    """Why utilization cannot be judged when graph capture (analysis/gpu/graph_capture.py) covers at least
    half of the GPU's idle time (of one device, or of all): captured launches run no kernel."""
    a = ctx.analysis
    rows = a.gpu if rank is None else a.gpu[a.gpu["rank"] == rank]
    if idle_us is None:
        idle_us = float(rows["idle_us"].sum())
    covered = sum(captured_us(ctx.trace, int(r), max(lo, float(f)), min(hi, float(e)))
                  for r, f, e in zip(rows["rank"], rows["first_ts"], rows["last_end"]))
    if idle_us <= 0 or covered < CAPTURE_SHARE * idle_us:
        return None
    n = sum(capture_count(ctx.trace, int(r)) for r in set(rows["rank"].tolist()))
    return (f"the trace records CUDA/HIP graph capture ({n} capture(s) covering {ms_text(covered, ',.1f')} of "
            f"the GPU's {ms_text(idle_us, ',.1f')} idle time): launches made while a stream captures run no "
            "kernel, so that idle time is one-time setup, not the loop's; trace the replays instead")


CAPTURE_SHARE = 0.5  # capture covering at least half the idle time: utilization is not judged


def _judged(gpu, column: str) -> np.ndarray:
    """The device figure low_utilization judges: within the steps (`step_` + column) where the
    rank has steps, else over the first-to-last span."""
    steps = gpu["step_" + column].to_numpy(float)
    return np.where(np.isfinite(steps), steps, gpu[column].to_numpy(float))


def _fix(top: dict | None) -> str:
    """The fix of the leading cause (compiled code: CUDA graphs), else the generic advice."""
    if top is None:
        return GENERIC_FIX
    if "group" in top:
        return compiled_fix(top["group"]["functions"])
    return with_frame(idle_fix(top["cause"], top.get("frame"), top.get("kind"), top.get("context")),
                      top.get("frame"))


def _said(cause: dict) -> str:
    """A cause as a title says it; a runtime call with the op it was called from."""
    if "group" in cause:
        return cause["cause"]
    said = short_cause(cause["cause"])
    return f"{said} (called from {short_cause(cause['context'])})" if cause.get("context") else said


LOW_UTILIZATION = Rule(
    "low_utilization", "utilization", _low_utilization, needs=(Need.GPU,),
    thresholds={
        "utilization": Threshold(0.6, "busy under 60% of the span: over 40% of the GPU is unused"),
        "low_window": Threshold(0.2, "a timeline window under 20% busy is a stall"),
        "low_window_fraction": Threshold(0.25, "stalls over a quarter of the timeline fire even "
                                               "when the average looks fine (bursty work)"),
        "cause_share": Threshold(0.25, "a host cause holding a quarter of the idle time is worth "
                                       "naming in the title and fix")},
    saving=Saving("the device's idle time the named host cause explains (without one, all its "
                  "idle time), per iteration",
                  "once the host no longer holds the GPU up there (workers load the data, the "
                  "read-back goes) the GPU runs through that time"))


def _dominant_scatter_gather(ctx: Context) -> Finding | None:
    a = ctx.analysis
    total = ctx.kernel_total
    if total <= 0 or a.categories.empty:
        return None
    cat = a.categories.set_index("category")["total_us"]
    share = float(cat.get("scatter_gather", 0.0)) / total
    top = a.kernels.iloc[0] if not a.kernels.empty else None
    top_share = float(top["total_us"]) / total if top is not None else 0.0
    if share < DOMINANT_SCATTER_GATHER.limit("share") and not (
            top is not None and top["category"] == "scatter_gather"
            and top_share >= DOMINANT_SCATTER_GATHER.limit("top_share")):
        return None
    return Finding(
        "dominant_scatter_gather", "medium",
        f"scatter/gather kernels take {100 * share:.0f}% of kernel time",
        {"share": round(share, 4), "top_kernel": str(top["name"]) if top is not None else None,
         "top_kernel_share": round(top_share, 4)},
        "Gather once into contiguous tensors (index_select on a flat view), avoid advanced "
        "indexing in inner loops, or let torch.compile fuse the indexing.",
        **DOMINANT_SCATTER_GATHER.unestimated())


DOMINANT_SCATTER_GATHER = Rule(
    "dominant_scatter_gather", "utilization", _dominant_scatter_gather, needs=(Need.GPU,),
    thresholds={
        "share": Threshold(0.25, "a quarter of kernel time in indexing; the figure behind it is not "
                                 "measured here: a seed report's PPO trainer (shared/seeds/"
                                 "001_b3b2488d169caf65.txt) had scatter_gather at 37% of CUDA time "
                                 "before its fix (26% after), its top kernel"),
        "top_share": Threshold(0.20, "or the top kernel is one, with over 20% by itself")},
    saving=Saving(None, "how much faster the indexing gets depends on its access pattern and "
                        "sizes, which the trace does not show: no estimate"))

RULES = (TINY_BATCH, LOW_UTILIZATION, DOMINANT_SCATTER_GATHER)
