"""Copy rules: host-to-device copies that block (pageable memory) or need not exist (tensors made
on the host, then moved). The op structure they read (fresh moves) is analysis/host/called_ops.py's."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...trace.model import Trace
from ..gpu.device_time import unrecorded_gpu
from ..host.called_ops import fresh_moves, launch_in_cpu_op
from ..host.links import gpu_launches
from ..setup import drop_setup
from ..host.sites import op_sites
from ..tree import starts_inside
from .base import Context, Need, Rule, Threshold, top_sites
from .finding import Finding
from .savings import Saving
from ...units import ms_text


def _pageable_htod(ctx: Context) -> Finding | None:
    a, trace = ctx.analysis, ctx.trace
    pg = ctx.of_kind("memcpy_htod_pageable")
    gpu_ranks = set(trace.gpu["rank"].unique().tolist())
    if pg.empty and set(trace.ranks) <= gpu_ranks:
        return None  # no pageable copies, and no rank without GPU work where a move is evidence
    moves = fresh_moves(trace)
    pg = pg[~starts_inside(moves[moves["kind"] == "factory"], pg)]  # cpu_alloc's evidence
    host = drop_setup(trace, moves[(moves["kind"] == "host_data").to_numpy() & ~moves["gpu"].to_numpy()])
    if pg.empty and host.empty:
        return None  # (ctx.points leaves setup's copies out: the model's upload runs once)
    copies = _gpu_copies_of(trace, pg)
    copy_us = float(copies["dur"].sum())
    n = len(pg) + len(host)
    per_it = n / ctx.iterations
    known = Need.ITERATIONS.present(ctx)  # per iteration only where iterations are known
    rate = f"{per_it:.1f} per iteration" if known else f"{n} in the trace, no iterations found"
    share = copy_us / max(float(a.gpu["busy_us"].sum()), 1e-9) if not a.gpu.empty else 0.0
    if per_it < PAGEABLE_HTOD.limit("per_iteration") and share < PAGEABLE_HTOD.limit("gpu_share"):
        return None
    sites = pd.concat([pg[["kind", "site", "dur"]], _as_points(trace, host, "host_to_device")])
    copied = pd.concat([pg["rank"], copies["rank"]]).unique()
    fix = ("Create the data on the device, or copy from pinned memory (tensor.pin_memory()) "
           "with non_blocking=True.")
    evidence = {"count": int(n), "per_iteration": round(per_it, 2) if known else None, "gpu_copies": int(len(pg)),
                "host_data_moves": int(len(host)), "copy_us": round(copy_us, 3),
                "bytes": float(copies["bytes"].sum(skipna=True)), "gpu_share": round(share, 4),
                "sites": top_sites(sites)}
    if pg.empty:  # only host moves on ranks without GPU work: nothing was copied to a device
        # A CPU-only trace (no launches, no listed GPUs) has no device at all; a rank whose GPU
        # work went unrecorded has one, but the trace does not show it (gpu_time.unrecorded_gpu).
        where = ("a CPU-only trace" if unrecorded_gpu(trace) is None else
                 "rank(s) with no recorded GPU activity")
        title = (f"{len(host)} `.to()` calls on host-built data (numpy/lists) on {where} "
                 f"({rate}): no copy here, but each would be a pageable "
                 "host-to-device copy on a GPU (judged from the host ops only)")
        evidence["judged_from"] = ("host ops only: aten::lift_fresh (torch.from_numpy / "
                                   "torch.tensor(data)) then aten::to, which copies nothing here")
        fix = "On a GPU: " + fix[0].lower() + fix[1:]
    else:
        where = f"{len(pg)} pageable host-to-device copies"
        title = f"{where} ({rate}, {ms_text(copy_us)} on the GPU)"
    return Finding(
        "pageable_htod", "medium", title, evidence, fix,
        **PAGEABLE_HTOD.estimated(ctx.per_iteration(copy_us, copied) if len(copies) else None,
                                  "no GPU copy to time: the moves are on a CPU-only rank, where "
                                  "they copy nothing"))


# Copies of a tensor a torch factory made just before (`torch.zeros(n).to(dev)`) are cpu_alloc's
# evidence, not this rule's: their fix is `device=`, not pinning. On a CPU-only rank there is no
# copy, so the evidence is the move itself: host data wrapped into a tensor (`torch.from_numpy`,
# `torch.tensor(data)`: aten::lift_fresh) and moved at once.
PAGEABLE_HTOD = Rule(
    "pageable_htod", "copies", _pageable_htod,
    thresholds={
        "per_iteration": Threshold(1.0, "pageable copies block the host while the driver stages "
                                        "them: more than one per iteration is a per-step copy"),
        "gpu_share": Threshold(0.01, "or fewer, larger copies that take 1% of GPU busy time")},
    saving=Saving("the GPU time of the pageable copies per iteration",
                  "from pinned memory with non_blocking=True a copy runs asynchronously and "
                  "overlaps compute (and the host no longer blocks while the driver stages it), so "
                  "at most the copy's time leaves the iteration"))


def _cpu_alloc(ctx: Context) -> Finding | None:
    trace = ctx.trace
    moves = fresh_moves(trace)
    made = drop_setup(trace, moves[moves["kind"] == "factory"])  # setup's run once
    gpu = trace.gpu
    small = gpu.iloc[:0]
    if not gpu.empty:
        htod = gpu[names_matching(gpu["name"], r"^Memcpy HtoD")]
        small = htod[htod["bytes"].fillna(0) < CPU_ALLOC.limit("small_copy_bytes")]
        small = drop_setup(trace, small[~launch_in_cpu_op(trace, small.index.to_numpy())])
    n = len(made) + len(small)
    per_it = n / ctx.iterations
    if per_it < CPU_ALLOC.limit("per_iteration"):
        return None
    copied = made[made["gpu"].to_numpy()]
    nbytes = pd.concat([copied["bytes"], small["bytes"]]).dropna()
    host_us = float((made["end"] - made["ts"]).sum() + small["dur"].sum())
    ranks = pd.concat([made["rank"], small["rank"]]).unique()
    return Finding(
        "cpu_alloc", "medium",
        f"{per_it:.1f} tensors per iteration made on the host, then moved to the device",
        {"count": int(n), "per_iteration": round(per_it, 2), "moves": int(len(made)),
         "unattributed_small_copies": int(len(small)),
         "creators": {str(k): int(v) for k, v in made["creator"].value_counts().items()},
         "bytes_median": float(nbytes.median()) if len(nbytes) else None,
         "copy_us": round(float(copied["copy_us"].sum() + small["dur"].sum()), 3),
         "sites": top_sites(_as_points(trace, made, "cpu_alloc"))},
        "Pass device= when creating tensors (torch.zeros(n, device=dev)) or preallocate them "
        "once outside the loop.",
        **CPU_ALLOC.estimated(ctx.per_iteration(host_us, ranks)))


# Tensors made on the host by a torch factory and moved at once (analysis/host/called_ops.py "fresh
# move"): every one is a tiny copy plus an allocation per step.
CPU_ALLOC = Rule(
    "cpu_alloc", "copies", _cpu_alloc, needs=(Need.ITERATIONS,),
    thresholds={
        "per_iteration": Threshold(2.0, "one per iteration can be a setup step; 2+ per iteration "
                                        "is a per-step buffer"),
        "small_copy_bytes": Threshold(64 * 1024, "where the trace does not show which op made a "
                                                  "copy (no cpu op around its launch), an HtoD "
                                                  "copy under 64 KiB is a buffer, not a batch of "
                                                  "data, and counts instead")},
    saving=Saving("the host time of the moves per iteration (each `.to()` call, its copy "
                  "included; the GPU copies where no op shows)",
                  "made with device= the tensor is filled on the device and the `.to()` call with "
                  "its tiny synchronous copy disappears"))


def _as_points(trace: Trace, moves: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Move ops as rows top_sites can rank (kind, site, dur)."""
    if moves.empty:
        return pd.DataFrame({"kind": [], "site": [], "dur": []})
    return pd.DataFrame({"kind": kind, "site": op_sites(trace, moves.index),
                         "dur": (moves["end"] - moves["ts"]).to_numpy()})


def _gpu_copies_of(trace: Trace, points: pd.DataFrame) -> pd.DataFrame:
    """The GPU memcpy events of memcpy sync points (their rows are launch calls, or the GPU
    event itself when the launch is not in the trace)."""
    gpu = trace.gpu
    if points.empty or gpu.empty:
        return gpu.iloc[:0]
    links = gpu_launches(trace)
    rows = set(points["row"].tolist())
    by_launch = links[links["launch_row"].isin(rows)]["gpu_row"].to_numpy()
    direct = [r for r in rows if r in gpu.index]
    copies = gpu.loc[np.unique(np.concatenate([by_launch, np.asarray(direct, dtype=np.int64)]))]
    return copies[copies["cat"] == "gpu_memcpy"]


def names_matching(names: pd.Series, pattern) -> pd.Series:
    """Boolean mask of a categorical name column, matching each distinct name once."""
    cats = pd.Series(names.cat.categories.astype(str))
    hit = cats.str.contains(pattern).to_numpy()
    codes = names.cat.codes.to_numpy()
    return pd.Series(hit[codes] & (codes >= 0), index=names.index)


RULES = (PAGEABLE_HTOD, CPU_ALLOC)
