"""Memory rules: the caching allocator holding far more than the tensors ever needed
(`allocator_waste`), allocated memory that grows every iteration (`memory_growth`: tensors kept
across iterations), and allocation churn in the hot loop (`alloc_churn`). They read
analysis/memory/usage.py's tables (the `[memory]` events of profile_memory=True)."""
from __future__ import annotations

from typing import Any

import pandas as pd

from ..intervals import thread_groups
from ..memory.usage import HOST, Memory
from .base import Context, Need, Rule, Threshold
from .finding import Finding, NotJudged
from .savings import Saving
from ...units import bytes_text

_NOT_TIME = ("memory, not time: the rule rates its severity by the memory at stake, and the "
             "time it costs (OOM, a smaller batch) is not in the trace")

GIB = 2**30


def _mem(ctx: Context) -> Memory:
    mem = ctx.analysis.memory
    if mem is None:
        from ..memory.usage import memory
        mem = ctx.analysis.memory = memory(ctx.trace)
    return mem


def _device_memory(ctx: Context, rank: int, device: int) -> float | None:
    """The device's total memory from deviceProperties (`totalGlobalMem`), None when absent."""
    for props in ctx.trace.device_properties.get(int(rank), []):
        if isinstance(props, dict) and props.get("id") == device:
            total = props.get("totalGlobalMem")
            return float(total) if isinstance(total, (int, float)) and total > 0 else None
    return None


def _sites(mem: Memory, row: pd.Series, by: str, n: int = 3) -> list[dict[str, Any]]:
    s = mem.sites
    mine = s[(s["rank"] == row["rank"]).to_numpy() & (s["device_type"] == row["device_type"]).to_numpy()
             & (s["device"] == row["device"]).to_numpy()]
    mine = mine.sort_values(by, ascending=False, kind="stable").head(n)
    return [{"phase": r.phase, "op": r.op, "allocations_per_iteration": round(float(r.per_iteration), 1),
             "median_bytes": float(r.median_bytes), "live_bytes": float(r.live_bytes)}
            for r in mine.itertuples() if getattr(r, by) > 0]


# -- allocator_waste ---------------------------------------------------------------------------
def _allocator_waste(ctx: Context) -> Finding | NotJudged | None:
    d = _mem(ctx).devices
    gpus = d[(d["device_type"] != HOST).to_numpy() & d["absolute"].to_numpy()
             & (d["peak_reserved"].fillna(0) > 0).to_numpy()]
    if gpus.empty:
        return NotJudged("allocator_waste", "no GPU memory events with Total Allocated and Total "
                                            "Reserved (the host has no caching allocator; 2021-era "
                                            "traces record neither total)")
    t = ALLOCATOR_WASTE.thresholds
    hit = gpus[(gpus["reserved_ratio"] >= t["ratio"].value) & (gpus["cached_bytes"] >= t["cached_bytes"].value)]
    if hit.empty:
        return None
    row = hit.sort_values("cached_bytes", ascending=False).iloc[0]
    total = _device_memory(ctx, row["rank"], row["device"])
    share = row["cached_bytes"] / total if total else None
    high = share is not None and share >= t["high_device_share"].value
    return Finding(
        "allocator_waste", "high" if high else "medium",
        f"{row['label']}: {bytes_text(row['peak_reserved'])} reserved by the caching allocator for a peak of "
        f"{bytes_text(row['peak_allocated'])} allocated ({row['reserved_ratio']:.1f}x)",
        {"device": row["label"], "peak_allocated": float(row["peak_allocated"]),
         "peak_reserved": float(row["peak_reserved"]), "reserved_ratio": round(float(row["reserved_ratio"]), 3),
         "cached_bytes": float(row["cached_bytes"]), "device_memory": total,
         "cached_share_of_device": round(float(share), 4) if share is not None else None,
         "devices": [str(x) for x in hit["label"]],
         "note": "reserved is the allocator's high-water mark since the process started; a peak "
                 "outside the traced window (the first iteration, evaluation) also leaves it high"},
        "The cache is fragmented or sized by an earlier peak. Set "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (segments grow in place instead of "
        "leaving odd-sized blocks unusable); check torch.cuda.max_memory_allocated() against "
        "max_memory_reserved() and torch.cuda.memory_snapshot() for a one-off peak outside the "
        "window. torch.cuda.empty_cache() is not the fix: the next iteration reserves the memory "
        "again, paying cudaMalloc and a device sync.", **ALLOCATOR_WASTE.unestimated())


ALLOCATOR_WASTE = Rule(
    "allocator_waste", "memory", _allocator_waste, needs=(Need.MEMORY,),
    thresholds={
        "ratio": Threshold(2.0, "the caching allocator rounds blocks up and keeps freed ones, so "
                                "reserved runs 1.1-1.5x the peak allocated in a steady loop (the "
                                "traces in shared/traces: 1.2x, 1.3x, 1.1x; DDP with buckets 1.9x); "
                                "twice the peak means half the reserved memory never held a tensor"),
        "cached_bytes": Threshold(1.0 * GIB, "below 1 GiB of unused reserve the waste cannot cost "
                                             "a larger batch on any current GPU"),
        "high_device_share": Threshold(0.25, "a quarter of the device's memory held unused is "
                                             "memory the model could have used (a bigger batch, "
                                             "fewer recomputed activations)")},
    saving=Saving(None, _NOT_TIME))


# -- memory_growth -----------------------------------------------------------------------------
def _memory_growth(ctx: Context) -> Finding | NotJudged | None:
    mem = _mem(ctx)
    d = mem.devices
    t = MEMORY_GROWTH.thresholds
    enough = d[d["iterations"] >= t["min_iterations"].value]
    if enough.empty:
        most = int(d["iterations"].max()) if len(d) else 0
        return NotJudged("memory_growth", f"{most} traced iteration(s) with memory events; growth "
                                          f"every iteration needs at least "
                                          f"{int(t['min_iterations'].value)}")
    hit = enough[(enough["growing_steps"] == enough["iterations"] - 1)
                 & (enough["growth_per_iteration"] >= t["per_iteration_bytes"].value)]
    if hit.empty:
        return None
    row = hit.sort_values("growth", ascending=False).iloc[0]
    its = mem.iterations
    mine = its[(its["rank"] == row["rank"]).to_numpy() & (its["device_type"] == row["device_type"]).to_numpy()
               & (its["device"] == row["device"]).to_numpy()].sort_values("iteration")
    sites = _sites(mem, row, "live_bytes")
    where = f", kept from {sites[0]['phase']} / {sites[0]['op']}" if sites else ""
    return Finding(
        "memory_growth", "high",
        f"{row['label']}: allocated memory grows every iteration, {bytes_text(row['growth_per_iteration'])} "
        f"per iteration{where}",
        {"device": row["label"], "iterations": int(row["iterations"]),
         "growth": float(row["growth"]), "growth_per_iteration": float(row["growth_per_iteration"]),
         "allocated_end": {int(i): float(a) for i, a in zip(mine["iteration"], mine["allocated_end"])},
         "absolute": bool(row["absolute"]), "kept_by": sites},
        "Something keeps each iteration's tensors alive: typically a loss or output appended to a "
        "list (or summed into a running total) with its autograd graph. Log loss.item() or "
        "loss.detach() (every N steps), keep no per-step tensors in lists, and run evaluation "
        "under torch.no_grad(). The phase and op above allocated what is still alive.",
        **MEMORY_GROWTH.unestimated())


MEMORY_GROWTH = Rule(
    "memory_growth", "memory", _memory_growth, needs=(Need.MEMORY, Need.ITERATIONS),
    thresholds={
        "min_iterations": Threshold(3, "every iteration must end above the one before, at least "
                                       "twice: one rise can be a one-off (optimizer state, a "
                                       "cache filling)"),
        "per_iteration_bytes": Threshold(16 * 1024, "smaller steady growth is bookkeeping (a few "
                                                    "scalars kept for batched logging: our own "
                                                    "trainer's host shows 48 B per iteration); 16 "
                                                    "KiB per iteration is 1.6 GB per 100k "
                                                    "iterations")},
    saving=Saving(None, _NOT_TIME))


# -- alloc_churn -------------------------------------------------------------------------------
def _alloc_churn(ctx: Context) -> Finding | NotJudged | None:
    mem = _mem(ctx)
    its = mem.iterations
    if its.empty:
        return NotJudged("alloc_churn", "no memory events inside a traced iteration")
    t = ALLOC_CHURN.thresholds
    allocations, wall = its["allocations"].to_numpy(), its["wall_us"].to_numpy(float)
    per_device = thread_groups(its, ("rank", "device_type", "device"))  # devices in key order
    rate = pd.DataFrame([(*key, allocations[at].sum(), wall[at].sum(), len(at)) for key, at in per_device.items()],
                        columns=["rank", "device_type", "device", "allocations", "wall_us", "iterations"])
    rate["per_iteration"] = rate["allocations"] / rate["iterations"]
    rate["per_ms"] = rate["allocations"] / (rate["wall_us"] / 1e3).where(rate["wall_us"] > 0)
    hit = rate[(rate["per_iteration"] >= t["per_iteration"].value) & (rate["per_ms"] >= t["per_ms"].value)]
    if hit.empty:
        return None
    row = hit.sort_values("per_ms", ascending=False).iloc[0]
    d = mem.devices
    label = d[(d["rank"] == row["rank"]) & (d["device_type"] == row["device_type"])
              & (d["device"] == row["device"])]["label"].iloc[0]
    sites = _sites(mem, row, "per_iteration")
    where = f", most in {sites[0]['phase']} / {sites[0]['op']}" if sites else ""
    return Finding(
        "alloc_churn", "low",  # the runner rates it by its saving
        f"{label}: {row['per_iteration']:,.0f} allocations per iteration ({row['per_ms']:.0f} per ms "
        f"of iteration time){where}",
        {"device": label, "allocations_per_iteration": round(float(row["per_iteration"]), 1),
         "allocations_per_ms": round(float(row["per_ms"]), 2), "sites": sites},
        "Allocate the loop's buffers once and reuse them: write results into preallocated tensors "
        "(out=, in-place ops, index_copy_), move tensor creation out of the inner loop, fuse "
        "elementwise chains (torch.compile) so temporaries disappear; on a GPU, CUDA graphs replay "
        "with static memory and no allocator calls.",
        **ALLOC_CHURN.estimated(float(row["per_iteration"]) * ALLOC_CHURN.limit("host_us_each")))


ALLOC_CHURN = Rule(
    "alloc_churn", "memory", _alloc_churn, needs=(Need.MEMORY, Need.ITERATIONS),
    thresholds={
        "per_iteration": Threshold(1000, "a loop that allocates fewer times per iteration cannot "
                                         "spend a measurable share of it in the allocator"),
        "per_ms": Threshold(100, "an allocation and its free cost the host about 1-2 us in "
                                 "torch's allocators (and the profiler records each), so 100 per "
                                 "ms of iteration is 10-20% of the host's time; eager training and "
                                 "inference in shared/traces run 3-30 per ms, every op's output "
                                 "included"),
        "host_us_each": Threshold(1.0, "an allocation and its free cost the host at least 1 us "
                                       "in torch's allocators (the low end of 1-2 us)")},
    saving=Saving("1 us of host time per allocation per iteration (a lower bound)",
                  "buffers allocated once and reused skip the allocator call and its free in "
                  "every iteration"))


RULES = (ALLOCATOR_WASTE, MEMORY_GROWTH, ALLOC_CHURN)
