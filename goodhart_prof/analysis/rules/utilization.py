"""Utilization rules: a GPU that waits, on launches (tiny kernels) or on the host, and a timeline
dominated by scatter/gather kernels."""
from __future__ import annotations

import re

import numpy as np

from ..idle import OTHER, UNTRACED
from .base import Context, Finding, Need, Rule, Threshold
from .savings import Saving


def _tiny_batch(ctx: Context) -> Finding | None:
    a, gpu = ctx.analysis, ctx.trace.gpu
    kernels = gpu[gpu["cat"] == "kernel"]
    if len(kernels) < TINY_BATCH.limit("min_kernels") or a.gpu.empty:
        return None
    util = float(a.gpu["busy_us"].sum() / max(a.gpu["span_us"].sum(), 1e-9))
    median = float(kernels["dur"].median())
    if util >= TINY_BATCH.limit("utilization") or median >= TINY_BATCH.limit("median_kernel_us"):
        return None
    short = TINY_BATCH.limit("short_gap_us")
    gap_us = sum(float(dur[dur < short].sum()) for dur in (b.gap_dur for b in a.burstiness))
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
                                         "longer ones are the host doing other work")},
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
    for b in a.burstiness:
        i = at.get((b.rank, b.device))
        if i is None or len(b.window_util) == 0:
            continue
        util = float(utilization[i])
        low = float(np.mean(np.asarray(b.window_util) < low_window))
        if util < low_util or low >= low_fraction:
            if worst is None or util < worst[0]:
                worst = (util, low, b, i)
    if worst is None:
        return None
    util, low, b, i = worst
    row = a.gpu.iloc[i:i + 1]
    gaps = b.gaps or {}
    causes = [c for c in b.idle_causes if c["cause"] != OTHER]
    top = causes[0] if causes and causes[0]["share"] >= LOW_UTILIZATION.limit("cause_share") else None
    in_steps = bool(np.isfinite(row["step_utilization"].to_numpy(float)[0]))
    where = "its steps" if in_steps else "its span"
    title = f"GPU {b.device} (rank {b.rank}) is busy {100 * util:.0f}% of {where}"
    if top is not None:
        title = (f"GPU idle {100 * (1 - util):.0f}%{' of its steps' if in_steps else ''}: the host is in "
                 f"{_said(top)} ({100 * top['share']:.0f}% of idle time)")
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
                         for c in b.idle_causes[:3]]},
        _with_frame(idle_fix(top["cause"], top.get("frame"), top.get("kind")), top.get("frame")) if top
        else GENERIC_FIX,
        est_saving_us=ctx.per_iteration(explained, [b.rank]),
        saving_note=(f"the GPU's idle time while the host is in {_said(top)}, per "
                     "iteration" if top is not None else
                     "the GPU's whole idle time per iteration (no single cause: an upper bound)"))


def _judged(gpu, column: str) -> np.ndarray:
    """The device figure low_utilization judges: within the steps (`step_` + column) where the
    rank has steps, else over the first-to-last span."""
    steps = gpu["step_" + column].to_numpy(float)
    return np.where(np.isfinite(steps), steps, gpu[column].to_numpy(float))


def _said(cause: dict) -> str:
    """A cause as a title says it; a runtime call with the op it was called from."""
    said = short_cause(cause["cause"])
    return f"{said} (called from {short_cause(cause['context'])})" if cause.get("context") else said


# A runtime call holding the host (idle.py's kinds) -> what to change.
RUNTIME_FIXES = {
    "alloc": "The host waits in the device allocator while the GPU idles: keep PyTorch's caching "
             "allocator on (no PYTORCH_NO_CUDA_MEMORY_CACHING / PYTORCH_NO_HIP_MEMORY_CACHING) and "
             "allocate buffers once, reusing them across iterations, instead of per step.",
    "free": "The host waits in the device free while the GPU idles (a free synchronizes the "
            "device): keep PyTorch's caching allocator on (no PYTORCH_NO_CUDA_MEMORY_CACHING / "
            "PYTORCH_NO_HIP_MEMORY_CACHING), allocate once and reuse, and never empty the cache "
            "(torch.cuda.empty_cache) inside the loop.",
    "context": "The host creates the GPU context (a first cudaFree / cuInit) while the GPU idles: "
               "a one-time start-up cost; run a warm-up iteration before the traced window "
               "(profiler schedule with wait/warmup steps) so it is not measured as a step.",
    "module": "The host loads GPU code (a module or library load) while the GPU idles: a one-time "
              "cost of first use; run a warm-up iteration before the traced window (profiler "
              "schedule with warmup steps), or load lazily-loaded modules up front.",
    "launch": "Kernel launches taking over a millisecond: first launches loading their code (or a "
              "full launch queue); run a warm-up iteration before the traced window (profiler "
              "schedule with warmup steps) so the code is loaded before it is measured.",
}


def _with_frame(fix: str, frame: str | None) -> str:
    return f"{fix} Most of that idle time is in {frame}." if frame else fix


# What the host was doing while the GPU idled -> what to change. First match wins, on the cause
# (and the Python frame inside it); a cause nothing matches gets the generic advice.
IDLE_FIXES = (
    (re.compile(r"DataLoader|_DataLoaderIter|collate|fetch", re.I),
     "The GPU waits for the next batch: load data in background workers "
     "(DataLoader with num_workers of 2 or more, persistent_workers=True, prefetch_factor=2 "
     "or more), move preprocessing "
     "(decode, resize) into those workers or onto the GPU, and copy batches with pin_memory=True and "
     ".to(device, non_blocking=True) so the copy overlaps compute."),
    (re.compile(r"aten::item|_local_scalar_dense|aten::to\b|_to_copy|aten::copy_|Synchronize|"
                r"cudaMemcpy|aten::nonzero|is_nonzero", re.I),
     "The host reads results back or copies synchronously while the GPU has nothing queued: "
     "remove the read-back (keep values on the GPU, log every N steps), and make copies "
     "non_blocking from pinned memory."),
    (re.compile(r"Optimizer\.|optimizer|zero_grad", re.I),
     "The optimizer step runs on the host between GPU work: use {optimizer}'s fused or foreach "
     "implementation, or capture the step with CUDA graphs / torch.compile."),
    (re.compile(r"logging|logger|wandb|tensorboard|SummaryWriter|checkpoint|torch/serialization", re.I),
     "Logging or saving runs on the critical path: do it every N steps, on a background thread, "
     "or from values already copied off the GPU asynchronously."),
)
GENERIC_FIX = ("Find what the GPU waits for in the gap classes: host_wait means the CPU is late "
               "(syncs, Python overhead, data on the host); launch means too many tiny kernels. "
               "idle_causes names the host code the idle time lies in.")


def idle_fix(cause: str, frame: str | None = None, kind: str | None = None) -> str:
    """The fix for GPU idle time spent in `cause` (a runtime call of `kind`: RUNTIME_FIXES, a
    sync the read-back advice; else IDLE_FIXES; the generic advice otherwise)."""
    if kind in RUNTIME_FIXES:
        return RUNTIME_FIXES[kind]
    if kind == "sync":
        return IDLE_FIXES[1][1]
    if cause == UNTRACED:
        return ("The launching thread recorded nothing while the GPU idled (Python outside any "
                "op or annotation, or time outside the trace): profile with_stack=True or add "
                "record_function scopes to see the code, then move that work off the critical path.")
    if "_MultiProcessingDataLoaderIter" in cause:  # workers exist already: they fall behind
        return ("The GPU waits for the next batch although the DataLoader has worker processes: "
                "they cannot keep up. Add workers (num_workers), prefetch more (prefetch_factor), "
                "make the per-sample work cheaper or move it onto the GPU, and copy batches with "
                "pin_memory=True and .to(device, non_blocking=True).")
    for text in (cause, frame):  # the cause first; when generic, the Python inside it may say more
        for pattern, fix in IDLE_FIXES:
            if text and pattern.search(text):
                return fix.format(optimizer=_optimizer(cause, frame))
    return (f"The GPU waits while the host runs {cause}: move that work off the launching thread, "
            "overlap it with GPU work, or make it cheaper. " + GENERIC_FIX)


def _optimizer(*texts: str | None) -> str:
    """The optimizer the cause names (`Optimizer.step#SGD.step` -> `torch.optim.SGD`), else a
    generic phrase: the advice must not assume Adam."""
    for text in texts:
        m = re.search(r"Optimizer\.(?:step|zero_grad)#(\w+)\.", text or "")
        if m:
            return f"torch.optim.{m.group(1)}"
    return "the optimizer"


def short_cause(cause: str) -> str:
    """A cause as a title says it: `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`
    -> `DataLoader.__next__`; anything else unchanged (long names cut)."""
    m = re.match(r"enumerate\((\w+)\)#\w*?\.(\w+)$", cause)
    if m:
        return f"{m.group(1)}.{m.group(2)}"
    return cause if len(cause) <= 60 else cause[:57] + "..."


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
        "share": Threshold(0.25, "the pattern that dominated the PPO report (scatter_gather 37%): "
                                 "a quarter of kernel time in indexing"),
        "top_share": Threshold(0.20, "or the top kernel is one, with over 20% by itself")},
    saving=Saving(None, "how much faster the indexing gets depends on its access pattern and "
                        "sizes, which the trace does not show: no estimate"))

RULES = (TINY_BATCH, LOW_UTILIZATION, DOMINANT_SCATTER_GATHER)
