"""Rank rules: one rank the others wait for at the collectives (`straggler_rank`), and
communication the step cannot hide behind compute (`exposed_communication`).

Both read the rank tables (analysis/ranks/stragglers.py): arrivals at matched collectives, and per
(iteration, rank) the step, compute, communication, exposed and waiting time.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..ranks.stragglers import Ranks
from .base import Context, Need, Rule, Threshold
from .finding import Finding
from .savings import Saving
from ...units import brief_duration


def _step_of(ranks: Ranks, ctx: Context) -> float:
    """Mean step time over the ranks and iterations (ProfilerStep#N); else the mean GPU span."""
    step = ranks.ranks["step_us"].astype(float)
    if step.notna().any():
        return float(step.mean())
    return float(ctx.analysis.gpu["span_us"].mean()) if not ctx.analysis.gpu.empty else float("nan")


def _why_late(row: pd.Series) -> tuple[str, str, str]:
    """The part of the slowest rank's lateness that dominates: (cause key, sentence, fix)."""
    parts = {"start": row["late_start_us"], "host": row["late_host_us"], "device": row["late_device_us"]}
    known = {k: float(v) for k, v in parts.items() if pd.notna(v)}
    rank, late = int(row["slowest_rank"]), float(row["late_us"])
    cause = max(known, key=known.get) if known else None
    if cause is None or known[cause] < STRAGGLER.limit("cause_share") * late:
        return ("unknown", f"rank {rank} reached it {brief_duration(late)} after the median rank; no single "
                f"part of its way there (step start, host, GPU queue) explains it",
                "Compare what rank {r} does before the collective with another rank in the trace "
                "viewer (goodhart-prof open).".format(r=rank))
    if cause == "start":
        it = int(row["iteration"])
        step = f"ProfilerStep#{it}" if it >= 0 else "the traced iteration"
        return ("start", f"rank {rank} began {step} {brief_duration(known['start'])} after the median rank, so "
                f"the delay lies before the step (the previous iteration's tail, input loading, or "
                f"work only that rank does between steps), which this window does not show",
                f"Trace the iteration before this one too (a wider PROF_ITERATIONS) to see what "
                f"rank {rank} does between steps; look for rank-specific work there (logging, "
                f"checkpointing or evaluation on one rank, a slower data loader worker) and move it "
                f"off the critical path or spread it across ranks.")
    if cause == "host":
        return ("host", f"rank {rank}'s host took {brief_duration(known['host'])} longer than the median rank "
                f"from the step's start to the launch, so its CPU work before the collective is slower",
                f"Find the host ops that take longer on rank {rank} before the collective (the trace "
                f"viewer, or py-spy on that rank): uneven input preparation, rank-specific Python "
                f"work, or a CPU shared with other processes.")
    return ("device", f"rank {rank}'s GPU was still busy with earlier kernels {brief_duration(known['device'])} "
            f"longer than the median rank's, so it had more compute to finish first (compute "
            f"imbalance {row['compute_imbalance']:.2f}x across ranks this iteration)",
            "Balance the work across ranks: shard by cost rather than by count (embedding tables, "
            "layers, experts), even out batch or sequence lengths per rank, and check that no rank "
            "runs extra kernels (metrics, EMA) others skip.")


def _straggler(ctx: Context) -> Finding | None:
    ranks = ctx.analysis.ranks
    it = ranks.iterations
    counts = it["slowest_rank"].value_counts()
    slowest = int(counts.index[0])
    if counts.iloc[0] < STRAGGLER.limit("iterations_share") * len(it):
        return None  # the slowest rank changes from iteration to iteration: jitter, not one rank
    mine = it[it["slowest_rank"] == slowest]
    caused = float(mine["caused_wait_us"].sum() / len(it))
    step = _step_of(ranks, ctx)
    share = caused / step if step > 0 else float("nan")
    if not share >= STRAGGLER.limit("wait_share"):
        return None
    worst = mine.sort_values("worst_wait_us").iloc[-1]
    cause, sentence, fix = _why_late(worst)
    evidence = {
        "rank": slowest, "iterations": f"{len(mine)} of {len(it)}",
        "arrived_last": f"{int(mine['last_count'].sum())} of {int(mine['collectives'].sum())} collectives",
        "others_wait_us_per_iteration": round(caused, 3), "step_us": round(step, 3),
        "share_of_step": round(share, 4),
        "worst_collective": f"{worst['worst_kind']} #{int(worst['worst_seq'])} of iteration "
                            f"{int(worst['iteration'])}: the others waited {brief_duration(worst['worst_wait_us'])} on average",
        "late_us": round(float(worst["late_us"]), 3), "cause": cause, "why": sentence,
        "compute_imbalance": round(float(worst["compute_imbalance"]), 3)}
    if ranks.offsets_us:
        evidence["clock_offsets_us"] = {str(k): v for k, v in ranks.offsets_us.items()}
    return Finding(
        "straggler_rank", "medium",
        f"rank {slowest} holds the others back: they wait {brief_duration(caused)} per iteration for it "
        f"({100 * share:.0f}% of a {brief_duration(step)} step)", evidence, fix, **STRAGGLER.estimated(caused))


# One rank the others keep waiting for at the collectives.
STRAGGLER = Rule(
    "straggler_rank", "ranks", _straggler, needs=(Need.GPU, Need.COMMUNICATION, Need.RANKS),
    thresholds={
        "wait_share": Threshold(0.05, "the others' wait for the slowest rank, per iteration, is at "
                                      "least 5% of the step: less is within step-to-step noise"),
        "iterations_share": Threshold(0.5, "the same rank is the slowest in at least half the "
                                           "iterations; otherwise the lateness moves between ranks "
                                           "(jitter) and no rank is to blame"),
        "cause_share": Threshold(0.5, "a part of the way to the collective (step start, host, GPU "
                                      "queue) is named as the cause when it explains at least half "
                                      "of the lateness")},
    saving=Saving("the others' wait for the slowest rank per iteration (others_wait_us_per_iteration)",
                  "every other rank idles at the collective until the late one arrives; with the "
                  "ranks level that wait leaves the step"))


def _exposed(ctx: Context) -> Finding | None:
    ranks = ctx.analysis.ranks
    r = ranks.ranks
    step_us = r["step_us"].to_numpy(float)
    at = np.flatnonzero(~np.isnan(step_us))  # communication outside the traced steps has no step to share
    if not len(at):
        return None
    col = {c: r[c].to_numpy(float)[at] for c in ("comm_us", "exposed_us", "wait_us")}
    rank, iteration = r["rank"].to_numpy()[at], r["iteration"].to_numpy()[at]
    # waiting at a collective for a later rank is the straggler's cost, not the transfer's
    waiting = np.minimum(col["wait_us"], col["exposed_us"])
    per_rank = pd.DataFrame({"step_us": step_us[at], "comm_us": col["comm_us"], "exposed_us": col["exposed_us"],
                             "transfer_us": col["exposed_us"] - waiting, "waiting_us": waiting}
                            ).groupby(rank).mean()
    per_rank["share"] = per_rank["transfer_us"] / per_rank["step_us"]
    worst_rank = int(per_rank["share"].idxmax())
    worst = per_rank.loc[worst_rank]
    if not worst["share"] >= EXPOSED.limit("share"):
        return None
    overlap = 1.0 - worst["exposed_us"] / worst["comm_us"] if worst["comm_us"] > 0 else 0.0
    comm = ctx.analysis.communication
    mine = comm.collectives[comm.collectives["rank"] == worst_rank].sort_values("total_us", ascending=False)
    top = mine.iloc[0]
    n_it = max(1, len(np.unique(iteration[rank == worst_rank])))
    per_it, mean_us = float(top["count"]) / n_it, float(top["total_us"]) / max(float(top["count"]), 1.0)
    sites = comm.sites[comm.sites["kind"] == top["kind"]]
    site = str(sites.iloc[0]["site"]) if len(sites) else ""
    evidence = {"rank": worst_rank, "exposed_us_per_iteration": round(float(worst["exposed_us"]), 3),
                "of_which_waiting_us": round(float(worst["waiting_us"]), 3),
                "step_us": round(float(worst["step_us"]), 3), "share_of_step": round(float(worst["share"]), 4),
                "overlap": round(float(overlap), 4),
                "collectives": ", ".join(f"{kind} {int(count)}x {brief_duration(total_us)}" for kind, count, total_us in
                                         zip(*(mine[c].head(3).tolist() for c in ("kind", "count", "total_us")))),
                "top_kind_per_iteration": round(per_it, 1), "top_kind_mean_us": round(mean_us, 3),
                "called_from": site, "ranks": int(per_rank.shape[0])}
    if ranks.reason:
        evidence["waiting_not_separated"] = ranks.reason
    return Finding(
        "exposed_communication", "medium",
        f"communication the step cannot hide: {brief_duration(worst['transfer_us'])} per iteration on rank "
        f"{worst_rank} ({100 * worst['share']:.0f}% of its step), mostly {top['kind']} "
        f"({per_it:.0f} per iteration); {100 * overlap:.0f}% of it overlapped by compute"
        + (("; one rank traced" if per_rank.shape[0] == 1 else "; arrivals not comparable across ranks")
           + ", so part of it may be waiting for slower ranks" if ranks.reason else ""),
        evidence, _exposed_fix(str(top["kind"]), per_it, mean_us, overlap, site),
        **EXPOSED.estimated(float(worst["transfer_us"])))


def _exposed_fix(kind: str, per_iteration: float, mean_us: float, overlap: float, site: str) -> str:
    """The advice for the collective that dominates, from what the evidence shows."""
    parts = []
    if overlap < EXPOSED.limit("no_overlap"):
        where = f" (called from {site})" if site else ""
        parts.append(f"No compute runs during the {kind}s{where}: the next kernels wait for each one. "
                     "Issue them on their own stream while compute goes on (DDP's reducer and FSDP do; "
                     "c10d calls with async_op=True and a late .wait() do too).")
    if per_iteration >= EXPOSED.limit("many_per_iteration") and mean_us < EXPOSED.limit("small_us"):
        parts.append(f"{per_iteration:.0f} {kind}s per iteration of {brief_duration(mean_us)} each are latency-bound: "
                     "bucket them into fewer, larger ones (DDP bucket_cap_mb; under torch.compile, fewer "
                     "graph breaks so DDP's buckets stay whole).")
    in_backward = bool(re.search(r"backward|AccumulateGrad", site, re.I))
    parts.append({
        "all_reduce": ("They already run in the backward pass; move less: a bf16 compression hook "
                       "(ddp.register_comm_hook), no_sync under gradient accumulation."
                       if in_backward else
                       "Launch the gradient all-reduces during the backward pass (DDP buckets overlap it; "
                       "gradient_as_bucket_view=True; no_sync under gradient accumulation), then move "
                       "less: a bf16 compression hook (ddp.register_comm_hook)."),
        "all_gather": "Prefetch FSDP's all-gathers (forward_prefetch=True, backward_prefetch="
                      "BACKWARD_PRE) so the next layer's parameters arrive while this one computes.",
        "reduce_scatter": "Overlap FSDP's reduce-scatters with the rest of the backward "
                          "(backward_prefetch) and reduce in bf16 (MixedPrecision reduce_dtype).",
        "all_to_all": "Pipeline the input all-to-alls with the previous batch's compute (TorchRec's "
                      "TrainPipelineSparseDist), and overlap the embedding all-to-alls with dense "
                      "compute that does not need them.",
    }.get(kind, "Overlap the collectives with compute that does not depend on them (async_op=True, "
                "wait late)."))
    return " ".join(parts)


# Communication no compute overlaps, beyond what waiting for a late rank explains.
EXPOSED = Rule(
    "exposed_communication", "ranks", _exposed, needs=(Need.GPU, Need.COMMUNICATION, Need.ITERATIONS),
    thresholds={
        "share": Threshold(0.15, "exposed transfer time of at least 15% of a rank's step: a share "
                                 "that overlapping with compute (DDP, FSDP) is built to hide"),
        "no_overlap": Threshold(0.05, "under 5% overlapped: the collectives run alone, in series "
                                      "with compute"),
        "many_per_iteration": Threshold(50, "dozens of collectives per iteration: each pays NCCL's "
                                            "fixed launch and synchronisation cost"),
        "small_us": Threshold(1000.0, "collectives under 1 ms each are dominated by latency, not "
                                      "bandwidth")},
    saving=Saving("the worst rank's exposed communication per iteration, less its waiting for "
                  "later ranks",
                  "overlapped with compute (DDP buckets, FSDP prefetch, async collectives) the "
                  "transfer runs under work the step does anyway; the waiting is straggler_rank's"))

RULES = (STRAGGLER, EXPOSED)
