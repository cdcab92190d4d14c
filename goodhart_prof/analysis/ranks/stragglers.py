"""Ranks side by side: per iteration, each rank's step time, compute and exposed communication, its
arrival at each collective, and the rank the others wait for (docs/DESIGN.md "ranks").

**Matching.** Every rank of a process group issues its collectives in the same order (NCCL
requires it), so the j-th communication kernel of one (iteration, process group, kind) on each
rank is one collective. A group is matched when at least two ranks ran it the same number of
times; the kernels of other groups are counted in `unmatched` and left out.

**Arrival** is the kernel's start on the rank's GPU: its stream reached the collective, and the
kernel then spins until every rank has arrived, so all ranks' kernels end together. The last
arrival L of a collective is the latest start; rank r waited `wait_us` = L - its start.

**Clocks.** Arrivals compare timestamps of different ranks, which only means something when their
clocks agree. Since a collective ends at one instant on every rank, each rank's clock offset is
the median, over its matched collectives, of its end minus the collective's median end; the
offsets are removed from that rank's times (a rank on another host is put on the others' clock).
When the ends still disagree by more than ALIGN_TOLERANCE_US (median over the collectives), the
matching or the clocks cannot be trusted and no arrival figures are given (`reason` says why).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...trace.model import Trace
from ...units import ms_text
from ..intervals import covered_before, merge_intervals, sorted_rows, thread_groups, tuple_codes

# Ends of one collective on its ranks, after the clock offsets: NCCL completes a collective on all
# ranks within a few microseconds (DLRM's 8 V100 ranks: 0-7 us); 100 us leaves room for larger
# multi-node groups and still catches clocks that disagree by a millisecond.
ALIGN_TOLERANCE_US = 100.0
# Offsets smaller than this are timestamp noise, not a clock to correct.
OFFSET_NOISE_US = 20.0

ARRIVAL_COLUMNS = ["iteration", "seq", "kind", "process_group", "rank", "arrival_us", "wait_us",
                   "dur_us", "last"]
MATCHED_COLUMNS = ["iteration", "seq", "kind", "process_group", "ranks", "last_rank", "skew_us",
                   "others_wait_us", "end_spread_us"]
RANK_COLUMNS = ["iteration", "rank", "step_us", "compute_us", "comm_us", "exposed_us", "wait_us",
                "last_count"]
ITERATION_COLUMNS = ["iteration", "ranks", "collectives", "step_us", "max_step_us", "slowest_rank",
                     "last_count", "caused_wait_us", "compute_imbalance", "worst_seq", "worst_kind",
                     "worst_wait_us", "late_us", "late_start_us", "late_host_us", "late_device_us"]


@dataclass
class Ranks:
    """`ranks`: one row per (iteration, rank) with communication, RANK_COLUMNS; `arrivals`: one
    row per rank of each matched collective; `collectives`: one row per matched collective;
    `iterations`: one row per iteration with matched collectives (the slowest rank and why);
    `offsets_us`: the clock offset removed from each rank (only those above OFFSET_NOISE_US);
    `unmatched`: communication kernels left out of matching; `reason`: why there are no arrival
    figures (None when there are)."""

    ranks: pd.DataFrame
    arrivals: pd.DataFrame
    collectives: pd.DataFrame
    iterations: pd.DataFrame
    offsets_us: dict[int, float] = field(default_factory=dict)
    unmatched: int = 0
    reason: str | None = None
    # Per matched kernel (index: its position in comm_kernels.comm_kernels): `ranks` that ran its
    # collective and its `wait_us` for the last of them (empty when no arrival figures are given).
    kernel_matches: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        {"ranks": pd.Series(dtype=np.int64), "wait_us": pd.Series(dtype=float)}))

    @property
    def judged(self) -> bool:
        return self.reason is None and not self.iterations.empty


def empty_ranks(reason: str) -> Ranks:
    return Ranks(pd.DataFrame(columns=RANK_COLUMNS), pd.DataFrame(columns=ARRIVAL_COLUMNS),
                 pd.DataFrame(columns=MATCHED_COLUMNS), pd.DataFrame(columns=ITERATION_COLUMNS),
                 reason=reason)


def rank_tables(trace: Trace, kernels: pd.DataFrame) -> Ranks:
    """The tables of the module docstring; `kernels` is comm_kernels.comm_kernels(trace)."""
    if kernels.empty:
        return empty_ranks("the trace has no communication kernels")
    per_rank = rank_iterations(trace, kernels)
    if kernels["rank"].nunique() < 2:
        out = empty_ranks("one rank traced: arrivals at collectives need the traces of two or more "
                          "ranks of the job (a folder of rank files, or a merged trace)")
        out.ranks = per_rank
        return out
    k, unmatched = _matched(kernels)
    if k.empty:
        out = empty_ranks("no collective could be matched across ranks: the ranks' traces hold "
                          "different iterations or different numbers of collectives")
        out.ranks, out.unmatched = per_rank, unmatched
        return out
    offsets, spread = _clock_offsets(k)
    if spread > ALIGN_TOLERANCE_US:
        out = empty_ranks(f"matched in order, the ranks' collectives do not end together "
                          f"({ms_text(spread, ',.2f')} apart at the median collective, after clock "
                          f"alignment): they belong to different process groups (which this trace "
                          f"does not name) or the ranks traced different iterations")
        out.ranks, out.unmatched = per_rank, unmatched
        return out
    shift = k["rank"].map(offsets).to_numpy(float)
    k = k.assign(ts=k["ts"] - shift, end=k["end"] - shift, launch_ts=k["launch_ts"] - shift)
    kernels, matched = _arrivals(k)
    arrivals = kernels[ARRIVAL_COLUMNS]
    waits = arrivals.groupby(["iteration", "rank"])[["wait_us", "last"]].sum()
    per_rank = per_rank.drop(columns=["wait_us", "last_count"]).merge(
        waits.rename(columns={"last": "last_count"}).reset_index(), on=["iteration", "rank"], how="left")
    per_rank["wait_us"] = per_rank["wait_us"].fillna(0.0)
    per_rank["last_count"] = per_rank["last_count"].fillna(0).astype(np.int64)
    steps = _step_starts(trace, offsets)
    iters = _iterations(kernels, matched, per_rank[RANK_COLUMNS], steps)
    shown = {int(r): round(float(o), 3) for r, o in offsets.items() if abs(o) > OFFSET_NOISE_US}
    size = kernels.groupby(["iteration", "seq"])["rank"].transform("size")
    matches = pd.DataFrame({"ranks": size.to_numpy(np.int64), "wait_us": kernels["wait_us"].to_numpy(float)},
                           index=kernels["kernel"].to_numpy()).sort_index()
    return Ranks(per_rank[RANK_COLUMNS], arrivals, matched, iters, shown, unmatched,
                 kernel_matches=matches)


def rank_iterations(trace: Trace, kernels: pd.DataFrame) -> pd.DataFrame:
    """Per (iteration, rank) with communication: step_us (its ProfilerStep#N; NaN without one),
    compute_us (union of its non-communication kernels launched in the iteration), comm_us (union
    of its communication kernels launched in it), exposed_us (the part of comm_us no compute
    kernel of the same device overlaps). wait_us and last_count are 0 here (rank_tables fills
    them from the arrivals)."""
    from ..gpu.kernels import comm_mask
    from ..host.links import gpu_launches
    from ..iterations import iterations, step_table
    gpu = trace.gpu
    links = gpu_launches(trace)
    comm = comm_mask(trace)
    compute = (gpu["cat"] == "kernel").to_numpy() & ~comm
    launched = links["launch_row"].to_numpy() >= 0
    it = np.full(len(links), -1, dtype=np.int64)
    it[launched] = iterations(trace, links["rank"].to_numpy()[launched],
                              links["launch_ts"].to_numpy(float)[launched])
    ts, end = gpu["ts"].to_numpy(float), gpu["end"].to_numpy(float)
    steps = step_table(trace)
    step_us = {(int(s), int(r)): float(d) for s, r, d in
               zip(steps["step"], steps["rank"], steps["dur"])}
    frame = pd.DataFrame({"rank": gpu["rank"].to_numpy(), "device": gpu["device"].to_numpy(),
                          "iteration": it})
    blocks = {key: merge_intervals(ts[at[compute[at]]], end[at[compute[at]]])
              for key, at in thread_groups(frame, ("rank", "device")).items()}
    rows = []
    for (rank, device, iteration), at in thread_groups(frame, ("rank", "device", "iteration")).items():
        mine = at[comm[at]]
        if not len(mine):
            continue
        cs, ce = merge_intervals(ts[mine], end[mine])
        ks, ke = merge_intervals(ts[at[compute[at]]], end[at[compute[at]]])
        bs, be = blocks[(rank, device)]
        comm_us = float((ce - cs).sum())
        overlapped = float((covered_before(bs, be, ce) - covered_before(bs, be, cs)).sum()) if len(bs) else 0.0
        rows.append({"iteration": iteration, "rank": rank,
                     "step_us": step_us.get((iteration, rank), np.nan),
                     "compute_us": float((ke - ks).sum()), "comm_us": comm_us,
                     "exposed_us": comm_us - overlapped, "wait_us": 0.0, "last_count": 0})
    out = pd.DataFrame(rows, columns=RANK_COLUMNS)
    pairs = tuple_codes(out["iteration"].to_numpy(np.int64), out["rank"].to_numpy(np.int64))
    if len(np.unique(pairs)) == len(pairs):  # one device per rank: nothing to add up
        return sorted_rows(out, ["iteration", "rank"])
    # a rank with several devices: its devices' figures add up
    return out.groupby(["iteration", "rank"], as_index=False).agg(
        step_us=("step_us", "first"), compute_us=("compute_us", "sum"), comm_us=("comm_us", "sum"),
        exposed_us=("exposed_us", "sum"), wait_us=("wait_us", "sum"),
        last_count=("last_count", "sum"))[RANK_COLUMNS]


def _matched(kernels: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The kernels of groups run equally often by two or more ranks, with `seq` (their order in
    the group) and `key` (iteration, process group, kind, seq); and how many were left out."""
    k = kernels.assign(process_group=kernels["process_group"].fillna("").astype(str),
                       kernel=np.arange(len(kernels)))
    k = k.sort_values(["rank", "ts"], kind="stable")
    group = ["iteration", "process_group", "kind"]
    k["seq"] = k.groupby(["rank", *group], sort=False).cumcount()
    counts = k.groupby([*group, "rank"]).size().rename("n").reset_index()
    agree = counts.groupby(group).agg(ranks=("rank", "nunique"), lo=("n", "min"), hi=("n", "max"))
    good = agree[(agree["ranks"] >= 2) & (agree["lo"] == agree["hi"])].reset_index()[group]
    kept = k.merge(good, on=group, how="inner")
    return kept, int(len(k) - len(kept))


def _clock_offsets(k: pd.DataFrame) -> tuple[pd.Series, float]:
    """Each rank's clock offset (median of its ends minus the collective's median end) and the
    median spread of ends across ranks after removing the offsets."""
    keys = ["iteration", "process_group", "kind", "seq"]
    median_end = k.groupby(keys)["end"].transform("median")
    offsets = (k["end"] - median_end).groupby(k["rank"]).median()
    offsets = offsets.where(offsets.abs() > OFFSET_NOISE_US, 0.0)
    end = k["end"] - k["rank"].map(offsets)
    spread = end.groupby([k[c] for c in keys]).agg(lambda e: e.max() - e.min())
    return offsets, float(spread.median()) if len(spread) else 0.0


def _arrivals(k: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The kernels of matched collectives with arrival_us, wait_us, last and `seq` renumbered as
    the collective's order in its iteration (by first arrival); and one row per collective."""
    keys = ["iteration", "process_group", "kind", "seq"]
    g = k.groupby(keys, sort=False)
    first, last = g["ts"].transform("min"), g["ts"].transform("max")
    k = k.assign(arrival_us=k["ts"] - first, wait_us=last - k["ts"], first=first)
    k["last"] = ((k["ts"] == last) & ~k.duplicated(keys + ["ts"])).to_numpy()  # a tie: one rank
    coll = k.groupby(keys, as_index=False).agg(first=("first", "min"), ranks=("rank", "size"),
                                               skew_us=("arrival_us", "max"),
                                               end_max=("end", "max"), end_min=("end", "min"))
    coll = coll.sort_values(["iteration", "first"], kind="stable")
    coll["order"] = coll.groupby("iteration").cumcount()
    k = k.merge(coll[keys + ["order"]], on=keys).drop(columns=["seq", "first"])
    k = k.rename(columns={"order": "seq", "dur": "dur_us"})
    k = k.sort_values(["iteration", "seq", "rank"], ignore_index=True)
    lasts = k[k["last"]].set_index(["iteration", "seq"])["rank"].rename("last_rank")
    others = k[~k["last"]].groupby(["iteration", "seq"])["wait_us"].mean().rename("others_wait_us")
    matched = coll.rename(columns={"order": "seq_new"}).drop(columns="seq").rename(
        columns={"seq_new": "seq"})
    matched["end_spread_us"] = matched["end_max"] - matched["end_min"]
    matched = matched.set_index(["iteration", "seq"]).join(lasts).join(others).reset_index()
    matched = matched.sort_values(["iteration", "seq"], ignore_index=True)
    return k, matched[MATCHED_COLUMNS]


def _step_starts(trace: Trace, offsets: pd.Series) -> pd.DataFrame:
    """Each (iteration, rank)'s ProfilerStep#N start on the aligned clock."""
    from ..iterations import step_table
    steps = step_table(trace)
    shift = steps["rank"].map(offsets).fillna(0.0).to_numpy(float)
    return pd.DataFrame({"iteration": steps["step"].to_numpy(), "rank": steps["rank"].to_numpy(),
                         "step_ts": steps["ts"].to_numpy(float) - shift})


def _iterations(kernels: pd.DataFrame, matched: pd.DataFrame, per_rank: pd.DataFrame,
                steps: pd.DataFrame) -> pd.DataFrame:
    """Per iteration: the slowest rank (whose late arrivals cost the others the most waiting),
    what it cost, the compute imbalance, and why it was late at its worst collective."""
    rows = []
    for iteration, mine in matched.groupby("iteration"):
        caused = mine.groupby("last_rank")["others_wait_us"].sum()
        slowest = int(caused.idxmax())
        ranks = per_rank[per_rank["iteration"] == iteration]
        compute = ranks["compute_us"].to_numpy(float)
        worst = mine[mine["last_rank"] == slowest].sort_values("others_wait_us").iloc[-1]
        late = _lateness(kernels, steps, iteration, int(worst["seq"]), slowest)
        rows.append({"iteration": int(iteration), "ranks": int(mine["ranks"].max()),
                     "collectives": int(len(mine)), "step_us": float(ranks["step_us"].mean()),
                     "max_step_us": float(ranks["step_us"].max()), "slowest_rank": slowest,
                     "last_count": int((mine["last_rank"] == slowest).sum()),
                     "caused_wait_us": float(caused.max()),
                     "compute_imbalance": float(compute.max() / compute.mean())
                     if len(compute) and compute.mean() > 0 else np.nan,
                     "worst_seq": int(worst["seq"]), "worst_kind": str(worst["kind"]),
                     "worst_wait_us": float(worst["others_wait_us"]), **late})
    return pd.DataFrame(rows, columns=ITERATION_COLUMNS)


def _lateness(kernels: pd.DataFrame, steps: pd.DataFrame, iteration: int, seq: int,
              slowest: int) -> dict[str, float]:
    """How much later than the median other rank the slowest one reached collective `seq`
    (`late_us`), and in which part of the way there: it began the iteration later
    (`late_start_us`), its host took longer from the step's start to the launch call
    (`late_host_us`), or its GPU took longer from the launch to the kernel's start, still busy
    with earlier work (`late_device_us`). Each part is the slowest rank's value minus the median
    of the others' (NaN where the trace lacks it: no ProfilerStep#N, no launch call)."""
    at = kernels[(kernels["iteration"] == iteration) & (kernels["seq"] == seq)]
    at = at.merge(steps, on=["iteration", "rank"], how="left")
    me, others = at[at["rank"] == slowest].iloc[0], at[at["rank"] != slowest]

    def part(mine: float, theirs: pd.Series) -> float:
        value = float(mine - theirs.median())
        return value if np.isfinite(value) else np.nan
    return {"late_us": part(me["ts"], others["ts"]),
            "late_start_us": part(me["step_ts"], others["step_ts"]),
            "late_host_us": part(me["launch_ts"] - me["step_ts"], others["launch_ts"] - others["step_ts"]),
            "late_device_us": part(me["ts"] - me["launch_ts"], others["ts"] - others["launch_ts"])}
