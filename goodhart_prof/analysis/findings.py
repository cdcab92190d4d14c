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

from ..trace.model import rows_named
from .tree import between, launched_inside, starts_inside

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
    cached = getattr(a, "_iterations", None)  # counted once per analysis (several rules ask)
    if cached is None:
        cached = _count_iterations(a.phases)
        try:
            a._iterations = cached
        except AttributeError:  # an object that takes no new attributes: count each time
            pass
    return cached


def _count_iterations(ph: pd.DataFrame) -> int:
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


# -- who caused a sync point -----------------------------------------------------------------------
# Grad-norm ops: what gradient clipping computes before it scales the gradients.
GRAD_NORM_OPS = frozenset({"aten::linalg_vector_norm", "aten::_foreach_norm", "aten::norm",
                           "aten::frobenius_norm"})
# Kinds that read a value back (`nonzero` is a shape, nan_checks' evidence; pageable HtoD goes
# the other way).
READBACK_KINDS = ("item", "is_nonzero", "memcpy_dtoh", "sync_memcpy", "stream_sync",
                  "device_sync", "event_sync")


def sync_origin(a) -> pd.DataFrame:
    """The sync points with two columns the zoo rules split them by (cached on the trace):

    - `internal`: torch issued it, not the user's code. (1) Anything inside an
      `Optimizer.step#`/`Optimizer.zero_grad#` annotation (the optimizer's bookkeeping). (2) On a
      CPU-only rank, an `item`/`is_nonzero` op nested inside another op: there every `.item()`
      counts as a sync point (no runtime calls tell a real wait apart), and torch's kernels read
      CPU scalars that way themselves (`aten::std` calls `aten::item`; foreach Adam reads its
      CPU step counters). Neither would wait for a GPU, so neither is the user's per-step
      read-back. (On GPU ranks rule 0 of syncs.py already dropped ops that make no runtime call.)
    - `grad_clip`: a read-back the user's code made after a gradient-norm op and before the
      optimizer step that follows it on the same thread (no step in between): gradient clipping
      that reads the norm back to the host (`total_norm.item()`, `if total_norm > m:`).
    """
    cache = a.trace.cache
    if "sync_origin" in cache:
        return cache["sync_origin"]
    sp = a.sync_points
    if sp.empty:
        out = sp.assign(internal=np.zeros(0, dtype=bool), grad_clip=np.zeros(0, dtype=bool))
        cache["sync_origin"] = out
        return out
    from .hostops import inside_torch_annotation, top_level_ops
    ev = a.trace.events
    ops = top_level_ops(a.trace)
    gpu_ranks = _device_ranks(a.trace)
    rows = sp.assign(end=sp["ts"] + sp["dur"])
    torch_own = inside_torch_annotation(a.trace, rows)
    is_nested = np.zeros(int(max(ev.index.max(), sp["row"].max())) + 1, dtype=bool)
    is_nested[ops.index.to_numpy()[~ops["top"].to_numpy()]] = True
    nested = is_nested[sp["row"].to_numpy()]
    cpu_only = ~sp["rank"].isin(gpu_ranks).to_numpy()
    scalar = sp["kind"].isin(["item", "is_nonzero"]).to_numpy()
    internal = torch_own | (cpu_only & nested & scalar)
    readback = sp["kind"].isin(READBACK_KINDS).to_numpy() & ~internal
    grad_clip = np.zeros(len(sp), dtype=bool)
    if readback.any():
        norms = ops[ops["name"].isin(GRAD_NORM_OPS).to_numpy() & ~ops["torch_own"].to_numpy()]
        steps = ev.iloc[rows_named(ev, _ANY_OPT_STEP, ("user_annotation", "cpu_op"))]  # cpu_op: 2021
        grad_clip[readback] = between(sp[readback], norms, steps)
    out = sp.assign(internal=internal, grad_clip=grad_clip)
    cache["sync_origin"] = out
    return out


_ANY_OPT_STEP = re.compile(r"Optimizer\.step#")


def _device_ranks(trace) -> set:
    """Ranks with GPU activity or CUDA/HIP runtime calls."""
    from .links import LAUNCH_CATS
    ev = trace.events
    rt_rank = ev["rank"].to_numpy()[ev["cat"].isin(LAUNCH_CATS).to_numpy()]
    return set(np.unique(rt_rank).tolist()) | set(trace.gpu["rank"].unique().tolist())


def _too_few(a, kinds: tuple[str, ...], per_iteration: float) -> bool:
    """Whether even all sync points of these kinds stay under the rule's rate: then the rule
    cannot fire and need not split them by origin (sync_origin's op structure is not built)."""
    sp = a.sync_points
    count = int(sp["kind"].isin(kinds).sum()) if not sp.empty else 0
    return count / _iterations(a) < per_iteration


def _user_kind(a, kind: str) -> pd.DataFrame:
    so = sync_origin(a)
    return so[(so["kind"] == kind).to_numpy() & ~so["internal"].to_numpy() & ~so["grad_clip"].to_numpy()]


# -- rules ------------------------------------------------------------------------------------------
# .item() is fine once per iteration (metrics moved once); 2+ per traced iteration means a
# per-step read-back, the pattern that cost the grid-world trainer half its speed. Counted: the
# user's reads (sync_origin: not torch's own, not gradient clipping's, which sync_grad_clip owns).
ITEM_PER_ITERATION = 2.0


def item_logging(a) -> Finding | None:
    if _too_few(a, ("item",), ITEM_PER_ITERATION):
        return None
    items = _user_kind(a, "item")
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


# Gradient clipping that reads the norm back syncs once per optimizer step, so one read-back per
# iteration in the norm-to-step window already fires: the clean way (torch's clip_grad_norm_,
# which multiplies by a clamped device-side coefficient) reads nothing back, ever.
GRAD_CLIP_PER_ITERATION = 1.0


def sync_grad_clip(a) -> Finding | None:
    if _too_few(a, READBACK_KINDS, GRAD_CLIP_PER_ITERATION):
        return None
    so = sync_origin(a)
    clip = so[so["grad_clip"].to_numpy()]
    per_it = len(clip) / _iterations(a)
    if per_it < GRAD_CLIP_PER_ITERATION:
        return None
    return Finding(
        "sync_grad_clip", "high" if per_it >= 4 else "medium",
        f"gradient clipping reads the norm back to the host {per_it:.1f} times per iteration",
        {"count": int(len(clip)), "per_iteration": round(per_it, 2),
         "wait_us": round(float(clip["dur"].sum()), 3),
         "by_kind": {str(k): int(v) for k, v in clip["kind"].value_counts().items()},
         "sites": _top_sites(clip)},
        "Clip without reading the norm: torch.nn.utils.clip_grad_norm_(params, max_norm, "
        "foreach=True) scales by a clamped device-side coefficient; log the returned norm with "
        "the other metrics, once per iteration.")


# Any nonzero in a traced iteration is a full host sync with a data-dependent shape; NaN/mask
# validation in the forward pass is the usual source, so one per iteration already fires.
# (Boolean-mask indexing calls nonzero inside aten::index: the user's indexing, so it counts.)
NONZERO_PER_ITERATION = 1.0


def nan_checks(a) -> Finding | None:
    if _too_few(a, ("nonzero",), NONZERO_PER_ITERATION):
        return None
    so = sync_origin(a)
    nz = so[(so["kind"] == "nonzero").to_numpy() & ~so["internal"].to_numpy()]
    per_it = len(nz) / _iterations(a)
    if per_it < NONZERO_PER_ITERATION:
        return None
    names = a.trace.events["name"].cat.categories
    return Finding(
        "nan_checks", "high" if per_it >= 5 else "medium",
        f"nonzero (boolean masks, torch.where(cond), isnan().any() checks) syncs {per_it:.1f} "
        "times per iteration",
        {"count": int(len(nz)), "per_iteration": round(per_it, 2),
         "wait_us": round(float(nz["dur"].sum()), 3), "isnan_in_trace": bool("aten::isnan" in names),
         "sites": _top_sites(nz)},
        "Put NaN/shape validation behind a debug flag; use torch.where(cond, a, b) or "
        "masked arithmetic instead of boolean indexing in the hot path.")


# `if tensor:` in the update: one per iteration already breaks compiled graphs.
IS_NONZERO_PER_ITERATION = 1.0


def branchy_value_head(a) -> Finding | None:
    if _too_few(a, ("is_nonzero",), IS_NONZERO_PER_ITERATION):
        return None
    br = _user_kind(a, "is_nonzero")
    per_it = len(br) / _iterations(a)
    if per_it < IS_NONZERO_PER_ITERATION:
        return None
    return Finding(
        "branchy_value_head", "medium",
        f"Python branches on tensor values (`if tensor:`) sync {per_it:.1f} times per iteration",
        {"count": int(len(br)), "per_iteration": round(per_it, 2),
         "wait_us": round(float(br["dur"].sum()), 3), "sites": _top_sites(br)},
        "Replace the branch with torch.where or give both variants one interface (e.g. value "
        "heads with the same methods), so the hot path is straight-line code.")


# Pageable HtoD copies block the host while the driver stages them. More than 1 per iteration
# or more than 1% of GPU time is worth pinning or building the data on the device. Copies of a
# tensor a torch factory made just before (`torch.zeros(n).to(dev)`) are cpu_alloc's evidence,
# not this rule's: their fix is `device=`, not pinning. On a CPU-only rank there is no copy, so
# the evidence is the move itself: host data wrapped into a tensor (`torch.from_numpy`,
# `torch.tensor(data)`: aten::lift_fresh) and moved at once, once per iteration or more.
PAGEABLE_PER_ITERATION = 1.0
PAGEABLE_SHARE = 0.01


def pageable_htod(a) -> Finding | None:
    from .hostops import fresh_moves
    pg = _kind(a, "memcpy_htod_pageable")
    gpu_ranks = set(a.trace.gpu["rank"].unique().tolist())
    if pg.empty and set(a.trace.ranks) <= gpu_ranks:
        return None  # no pageable copies, and no rank without GPU work where a move is evidence
    moves = fresh_moves(a.trace)
    pg = pg[~_inside_moves(pg, moves[moves["kind"] == "factory"])]
    host = moves[(moves["kind"] == "host_data").to_numpy() & ~moves["gpu"].to_numpy()]
    if pg.empty and host.empty:
        return None
    copies = _gpu_copies_of(a.trace, pg)
    copy_us = float(copies["dur"].sum())
    n = len(pg) + len(host)
    per_it = n / _iterations(a)
    share = copy_us / max(float(a.gpu["busy_us"].sum()), 1e-9) if not a.gpu.empty else 0.0
    if per_it < PAGEABLE_PER_ITERATION and share < PAGEABLE_SHARE:
        return None
    sites = pd.concat([pg[["kind", "site", "dur"]], _as_points(a.trace, host, "host_to_device")])
    where = (f"{len(pg)} pageable host-to-device copies" if not pg.empty else
             f"{len(host)} moves of host-built data (numpy/lists) to the device")
    return Finding(
        "pageable_htod", "high" if share >= 0.05 else "medium",
        f"{where} ({per_it:.1f} per iteration, {copy_us / 1000:.2f} ms on the GPU)",
        {"count": int(n), "per_iteration": round(per_it, 2), "gpu_copies": int(len(pg)),
         "host_data_moves": int(len(host)), "copy_us": round(copy_us, 3),
         "bytes": float(copies["bytes"].sum(skipna=True)), "gpu_share": round(share, 4),
         "sites": _top_sites(sites)},
        "Create the data on the device, or copy from pinned memory (tensor.pin_memory()) "
        "with non_blocking=True.")


# Tensors made on the host by a torch factory and moved at once (`torch.zeros(n)` then
# `.to(device)`; analysis/hostops.py "fresh move"): every one is a tiny copy plus an allocation
# per step. One per iteration can be a setup step; 2+ per iteration is a per-step buffer. Where the
# trace does not show which op made the copy (no cpu op around its launch), a small HtoD copy
# (under 64 KiB: a buffer, not a batch of data) counts instead, as before the op structure.
SMALL_COPY_BYTES = 64 * 1024
SMALL_COPIES_PER_ITERATION = 2.0


def cpu_alloc(a) -> Finding | None:
    from .hostops import fresh_moves, launch_in_cpu_op
    moves = fresh_moves(a.trace)
    made = moves[moves["kind"] == "factory"]
    gpu = a.trace.gpu
    small = gpu.iloc[:0]
    if not gpu.empty:
        htod = gpu[_names_matching(gpu["name"], r"^Memcpy HtoD")]
        small = htod[htod["bytes"].fillna(0) < SMALL_COPY_BYTES]
        small = small[~launch_in_cpu_op(a.trace, small.index.to_numpy())]
    n = len(made) + len(small)
    per_it = n / _iterations(a)
    if per_it < SMALL_COPIES_PER_ITERATION:
        return None
    copied = made[made["gpu"].to_numpy()]
    nbytes = pd.concat([copied["bytes"], small["bytes"]]).dropna()
    return Finding(
        "cpu_alloc", "medium",
        f"{per_it:.1f} tensors per iteration made on the host, then moved to the device",
        {"count": int(n), "per_iteration": round(per_it, 2), "moves": int(len(made)),
         "unattributed_small_copies": int(len(small)),
         "creators": {str(k): int(v) for k, v in made["creator"].value_counts().items()},
         "bytes_median": float(nbytes.median()) if len(nbytes) else None,
         "copy_us": round(float(copied["copy_us"].sum() + small["dur"].sum()), 3),
         "sites": _top_sites(_as_points(a.trace, made, "cpu_alloc"))},
        "Pass device= when creating tensors (torch.zeros(n, device=dev)) or preallocate them "
        "once outside the loop.")


def _as_points(trace, moves: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Move ops as rows _top_sites can rank (kind, site, dur)."""
    from .sites import op_sites
    if moves.empty:
        return pd.DataFrame({"kind": [], "site": [], "dur": []})
    return pd.DataFrame({"kind": kind, "site": op_sites(trace, moves.index),
                         "dur": (moves["end"] - moves["ts"]).to_numpy()})


def _inside_moves(points: pd.DataFrame, moves: pd.DataFrame) -> np.ndarray:
    """Whether each sync point's host call starts inside one of the move ops (same thread)."""
    return starts_inside(moves, points)


def _gpu_copies_of(trace, points: pd.DataFrame) -> pd.DataFrame:
    """The GPU memcpy events of memcpy sync points (their rows are launch calls, or the GPU
    event itself when the launch is not in the trace)."""
    gpu = trace.gpu
    if points.empty or gpu.empty:
        return gpu.iloc[:0]
    from .links import gpu_launches
    links = gpu_launches(trace)
    rows = set(points["row"].tolist())
    by_launch = links[links["launch_row"].isin(rows)]["gpu_row"].to_numpy()
    direct = [r for r in rows if r in gpu.index]
    copies = gpu.loc[np.unique(np.concatenate([by_launch, np.asarray(direct, dtype=np.int64)]))]
    return copies[copies["cat"] == "gpu_memcpy"]


_FUSED_OPT = re.compile(r"fused_adam|FusedAdam|_fused_adamw?_|fused_sgd|FusedSgd|fused_adagrad|"
                        r"FusedAdagrad", re.I)
# Optimizers that have a fused implementation in torch (`fused=True`): the fix exists for them.
# The rule id says Adam (the usual case), but SGD and Adagrad steps are judged the same way.
_OPT_STEP = re.compile(r"^Optimizer\.step#(Adam|AdamW|SGD|Adagrad)\.step$")
# A fused step launches the step-counter increment plus one fused kernel per (device, dtype)
# group: 1-3 kernels. foreach launches one multi-tensor kernel per arithmetic stage (Adam: 6-8),
# a for-loop several per parameter tensor. 4+ kernels per step with no fused-optimizer kernel
# among them fires (fewer is a fused step, or a step that runs on the host).
UNFUSED_KERNELS_PER_STEP = 4


def unfused_adam(a) -> Finding | None:
    ev = a.trace.events
    if a.trace.gpu.empty:
        return None
    steps = ev.iloc[rows_named(ev, _OPT_STEP, ("user_annotation", "cpu_op"))]
    if steps.empty:
        return None
    from .links import gpu_launches
    links = gpu_launches(a.trace)
    links = links[links["launch_row"].to_numpy() >= 0]
    inside = _launched_inside(steps, links)
    kernels = ev.loc[inside]
    kernels = kernels[(kernels["cat"] == "kernel").to_numpy()]
    if any(_FUSED_OPT.search(str(n)) for n in kernels["name"].unique()):  # each name once
        return None
    per_step = len(kernels) / len(steps)
    if per_step < UNFUSED_KERNELS_PER_STEP:
        return None
    kinds = sorted({str(n).split("#", 1)[1].split(".")[0] for n in steps["name"].astype(str)})
    return Finding(
        "unfused_adam", "medium",
        f"the optimizer step ({', '.join(kinds)}) is not fused: {per_step:.0f} kernels per step",
        {"optimizer": kinds, "optimizer_steps": int(len(steps)),
         "kernels_per_step": round(per_step, 1), "gpu_us": round(float(kernels["dur"].sum()), 3),
         "cpu_us": round(float(steps["dur"].sum()), 3)},
        "torch.optim.Adam(params, fused=True) (also AdamW, SGD, Adagrad; CUDA), with the learning "
        "rate as a device tensor.")


def _launched_inside(spans: pd.DataFrame, links: pd.DataFrame) -> np.ndarray:
    """GPU rows whose launch call starts inside one of the spans on the span's thread."""
    found = [part["gpu_row"].to_numpy() for _, part in launched_inside(spans, links)]
    return np.unique(np.concatenate(found)) if found else np.empty(0, dtype=np.int64)


# 16-bit (or 8-bit) GEMM/conv kernels by name. CUTLASS spells the math: `h1688`/`h16816` (fp16),
# `bf16_s16816` (bf16 in, fp32 accumulate); a bare `s1688gemm`/`s16816gemm` is TF32 on fp32 data
# (sampled_128rank's A100 GEMMs), which keeps fp32's memory traffic, so it is not mixed precision.
# cuBLASLt's Hopper `nvjet_*` names carry type letters instead (s fp32, h fp16, t bf16): `nvjet_tst`
# is bf16 in/out with fp32 accumulation, `nvjet_hsh` fp16.
_LOW_PRECISION = re.compile(r"bf16|f16|fp16|half|h884|h1688|h16816|hmma|e4m3|e5m2|fp8|nvjet_[ht]s[ht]",
                            re.I)
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
        f"GEMM/conv kernels run in fp32 or TF32 ({100 * (1 - half_us / mm_us):.0f}% of their time)",
        {"gemm_conv_us": round(mm_us, 3), "low_precision_us": round(half_us, 3),
         "gemm_conv_share": round(mm_us / total, 4),
         "top": mm.head(3)["name"].astype(str).tolist()},
        "Run forward and loss under torch.autocast(device_type='cuda', dtype=torch.bfloat16).")


# tiny_batch (launch-bound): the GPU mostly waits (utilization under 50%) while its kernels are
# tiny (median under 10 us, about the cost of launching one). That is what too small a batch
# (too few envs) looks like: each kernel has too little work to cover its own launch. Judged on
# 100+ kernels (fewer is no steady state). A CPU-only trace has no kernels: never fires there.
LAUNCH_UTIL = 0.5
LAUNCH_MEDIAN_US = 10.0
LAUNCH_MIN_KERNELS = 100


def tiny_batch(a) -> Finding | None:
    gpu = a.trace.gpu
    kernels = gpu[gpu["cat"] == "kernel"]
    if len(kernels) < LAUNCH_MIN_KERNELS or a.gpu.empty:
        return None
    util = float(a.gpu["busy_us"].sum() / max(a.gpu["span_us"].sum(), 1e-9))
    median = float(kernels["dur"].median())
    if util >= LAUNCH_UTIL or median >= LAUNCH_MEDIAN_US:
        return None
    return Finding(
        "tiny_batch", "high",
        f"launch-bound: {len(kernels):,} kernels with a median of {median:.1f} us, GPU busy {100 * util:.0f}%",
        {"kernels": int(len(kernels)), "median_kernel_us": round(median, 3),
         "utilization": round(util, 4)},
        "Give each kernel more work (more envs per batch, larger minibatches), fuse with "
        "torch.compile, and replay "
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


_COMPILED_BACKWARD = "CompiledFunctionBackward"
_BACKWARD = re.compile(r"autograd::engine|Backward", re.I)
_ACCUMULATE = re.compile(r"AccumulateGrad")
# Eager update: the trace trains (backward ops present) on a GPU with 50+ activities, and no
# backward node is a compiled graph's (`CompiledFunctionBackward`, what torch.compile'd code
# records under autograd). Judged on the backward, not on the whole trace, because the rollout can
# be compiled (Triton kernels, compiled regions) while the update is not. Parameter-gradient
# accumulation (`AccumulateGrad`) is always eager and does not count either way. On the CPU
# compile does not pay (the trainer leaves it off there): no GPU activity, no finding.
EAGER_MIN_KERNELS = 50


def eager_update(a) -> Finding | None:
    gpu = a.trace.gpu
    if len(gpu) < EAGER_MIN_KERNELS:
        return None
    ev = a.trace.events
    names = pd.Series(ev["name"].cat.categories.astype(str))
    backward = names[names.str.contains(_BACKWARD) & ~names.str.contains(_ACCUMULATE)]
    if backward.empty or backward.str.contains(_COMPILED_BACKWARD).any():
        return None
    count = int(ev["name"].isin(backward.tolist()).sum())
    compiled_elsewhere = bool(names.str.contains(r"Torch-Compiled Region|triton_").any())
    return Finding(
        "eager_update", "low",
        "the update runs eagerly: no compiled graph in the backward pass"
        + (" (other code in the trace is compiled)" if compiled_elsewhere else ""),
        {"kernels": int(len(gpu)), "backward_ops": count,
         "backward_op_names": int(len(backward)), "compiled_elsewhere": compiled_elsewhere},
        "torch.compile the loss/update function (warm it up before timing) to fuse elementwise "
        "chains into a few Triton kernels.")


RULES: tuple[Callable, ...] = (item_logging, sync_grad_clip, nan_checks, branchy_value_head,
                               pageable_htod, cpu_alloc, unfused_adam, no_amp, tiny_batch,
                               low_utilization, dominant_scatter_gather, eager_update)
# The anti-pattern zoo (trainer/antipatterns.py): each planted pattern's name is the id of the
# rule that must detect it; scripts/bench_zoo.py checks recall and precision of exactly these.
ZOO_RULES = ("item_logging", "cpu_alloc", "nan_checks", "sync_grad_clip", "branchy_value_head",
             "pageable_htod", "unfused_adam", "no_amp", "eager_update", "tiny_batch")


def findings(a) -> list[Finding]:
    found = [f for rule in RULES if (f := rule(a)) is not None]
    return sorted(found, key=lambda f: SEVERITIES.index(f.severity))
