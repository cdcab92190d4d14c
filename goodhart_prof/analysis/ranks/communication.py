"""Communication per rank: the collectives each device ran (NCCL/RCCL kernels), their time, what
they moved where the trace records it, and how much of their time compute kernels overlapped.

Each communication kernel's kind, message size S and recorded group size come from
comm_kernels.py. **Group size** n: `Group size` from the args; else, with the ranks side by side
(stragglers.py), the job's `distributedInfo.world_size` W for a collective that all W ranks ran
together (matched and ending together): its group is the whole job (`group_source`
`all ranks`). Where a size, its dtype or the group size is not known, the figures that need it are
null: never a guess.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ...trace.model import Trace
from ..gpu.kernels import comm_mask
from ..intervals import covered_before, exact_sums, merge_intervals, sorted_group_sums, thread_groups, tuple_codes
from .comm_kernels import COMM_OP, comm_kernels, has_communication

if TYPE_CHECKING:
    from .stragglers import Ranks

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv", "other")

COLLECTIVE_COLUMNS = ["rank", "device", "kind", "count", "total_us", "sized_count", "bytes",
                      "algbw_gbps", "busbw_gbps", "wait_us", "arrived_busbw_gbps", "group_size",
                      "size_source", "group_source"]
OVERLAP_COLUMNS = ["rank", "device", "comm_us", "overlapped_us", "exposed_us", "overlap"]
SITE_COLUMNS = ["kind", "site", "count", "total_us"]


def bus_factor(kind: np.ndarray, n: np.ndarray) -> np.ndarray:
    """busbw / algbw per kernel, nccl-tests' factors
    (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md): all_reduce 2(n-1)/n;
    all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, send_recv 1. NaN for `other`, and
    where the group size n is unknown and the factor needs it."""
    n = np.asarray(n, dtype=float)
    ring = (n - 1) / np.where(n > 0, n, np.nan)
    return np.select([kind == "all_reduce", np.isin(kind, ["all_gather", "reduce_scatter", "all_to_all"]),
                      np.isin(kind, ["broadcast", "send_recv"])], [2 * ring, ring, 1.0], np.nan)


@dataclass
class Communication:
    """`collectives`: one row per (rank, device, kind), COLLECTIVE_COLUMNS; `overlap`: one row
    per (rank, device) that ran communication, OVERLAP_COLUMNS; `sites`: where the host called
    them, SITE_COLUMNS (all ranks together, most kernel time first). All empty without any."""

    collectives: pd.DataFrame
    overlap: pd.DataFrame
    sites: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SITE_COLUMNS))

    @property
    def sizes_recorded(self) -> bool:
        return bool(len(self.collectives)) and bool((self.collectives["sized_count"] > 0).any())


def communication(trace: Trace, ranks: "Ranks | None" = None) -> Communication:
    """The collectives table and the overlap table of a trace (both empty without any
    communication kernel); `ranks` (stragglers.rank_tables) gives the group size of collectives
    all the job's ranks ran together where the args record none."""
    if not has_communication(trace):
        return Communication(pd.DataFrame(columns=COLLECTIVE_COLUMNS),
                             pd.DataFrame(columns=OVERLAP_COLUMNS))
    kernels = with_job_groups(comm_kernels(trace), ranks, trace.world_size)
    return Communication(collective_table(kernels), overlap_table(trace), site_table(trace, kernels))


def with_job_groups(kernels: pd.DataFrame, ranks: "Ranks | None", world_size: int | None) -> pd.DataFrame:
    """`kernels` with, from the ranks side by side: `wait_us` (the kernel's wait for the last rank
    to arrive at its collective; NaN when not matched), and group_size = world_size (group_source
    `all ranks`) where no group size is recorded and all world_size ranks ran the kernel's
    collective (a shard-sized all_gather then gets its size too)."""
    out = kernels.assign(wait_us=np.nan)
    if ranks is None or not ranks.judged or ranks.kernel_matches.empty:
        return out
    m = ranks.kernel_matches
    out.loc[m.index.to_numpy(), "wait_us"] = m["wait_us"].to_numpy()
    if not world_size:
        return out
    fill = np.zeros(len(out), dtype=bool)
    fill[m.index.to_numpy()[m["ranks"].to_numpy() == world_size]] = True
    fill &= np.isnan(out["group_size"].to_numpy(float))
    out.loc[fill, "group_size"] = float(world_size)
    out.loc[fill, "group_source"] = "all ranks"
    shard = fill & np.isnan(out["bytes"].to_numpy(float)) & ~np.isnan(out["shard_bytes"].to_numpy(float))
    out.loc[shard, "bytes"] = out.loc[shard, "shard_bytes"] * world_size
    out.loc[shard, "size_source"] = "shapes"
    return out


def collective_table(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, device, kind): count and total_us of all its kernels; sized_count, bytes,
    algbw_gbps = S/t and busbw_gbps over the kernels whose size is known (time-weighted:
    sum of S / sum of t); null where none is; wait_us (the kernels' waiting for the last rank,
    null when none was matched) and arrived_busbw_gbps (busbw over the time after the last rank
    arrived: sum of busbw bytes / sum of (t - wait) over the matched sized kernels); group_size (its kernels' one group size, NaN when
    unknown for any or mixed), size_source and group_source (the kernels' sources, `+`-joined)."""
    if kernels.empty:
        return pd.DataFrame(columns=COLLECTIVE_COLUMNS)
    rank, device = kernels["rank"].to_numpy(), kernels["device"].to_numpy()
    kind = kernels["kind"].to_numpy(dtype=object).astype(str)
    # groups numbered in order of first appearance (ties of the final sort keep that order)
    code = tuple_codes(rank, device, kind)
    _, first, lexical = np.unique(code, return_index=True, return_inverse=True)
    appearance = np.argsort(np.argsort(first, kind="stable"), kind="stable")
    group = appearance[lexical.ravel()]
    n = len(first)
    at = np.sort(first)  # each group's first row, groups in appearance order
    dur = kernels["dur"].to_numpy(float)
    size = kernels["bytes"].to_numpy(float)
    sized = ~np.isnan(size)
    bus = size * bus_factor(kind, kernels["group_size"])
    wait = kernels["wait_us"].to_numpy(float) if "wait_us" in kernels else np.full(len(kernels), np.nan)
    matched = ~np.isnan(wait)
    on_bus = sized & np.isfinite(bus)
    net = on_bus & matched
    sums = exact_sums(group, n, total=dur, b=np.where(sized, size, 0.0), sized_dur=np.where(sized, dur, 0.0),
                      bus_bytes=np.where(on_bus, bus, 0.0), bus_dur=np.where(on_bus, dur, 0.0),
                      waited=np.nan_to_num(wait), net_bytes=np.where(net, bus, 0.0),
                      net_dur=np.where(net, dur - np.nan_to_num(wait), 0.0))
    sized_count = np.bincount(group, weights=sized, minlength=n).astype(np.int64)
    n_matched = np.bincount(group, weights=matched, minlength=n)
    with np.errstate(divide="ignore", invalid="ignore"):  # bytes per us -> GB/s: x 1e6 / 1e9
        ratio = lambda a, b: np.where(b > 0, a / b / 1e3, np.nan)  # noqa: E731
        out = pd.DataFrame({
            "rank": rank[at], "device": device[at], "kind": kind[at].astype(object),
            "count": np.bincount(group, minlength=n).astype(np.int64), "total_us": sums["total"],
            "sized_count": sized_count, "bytes": np.where(sized_count > 0, sums["b"], np.nan),
            "algbw_gbps": ratio(sums["b"], sums["sized_dur"]),
            "busbw_gbps": ratio(sums["bus_bytes"], sums["bus_dur"]),
            "wait_us": np.where(n_matched > 0, sums["waited"], np.nan),
            "arrived_busbw_gbps": ratio(sums["net_bytes"], sums["net_dur"])})
    order = np.argsort(group, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(group, minlength=n))]
    group_size = kernels["group_size"].to_numpy(float)[order]
    src = {c: kernels[c].to_numpy(dtype=object)[order] for c in ("size_source", "group_source")}
    sizes, sources = [], {c: [] for c in src}
    for a, b in zip(bounds[:-1], bounds[1:]):
        g = group_size[a:b]
        sizes.append(g[0] if not np.isnan(g).any() and (g == g[0]).all() else np.nan)
        for c, values in src.items():
            sources[c].append(_sources(values[a:b]))
    out["group_size"] = np.asarray(sizes, dtype=float)
    for c, values in sources.items():
        out[c] = pd.Series(values, dtype=object)
    rank_order = np.lexsort((-out["total_us"].to_numpy(), out["device"].to_numpy(), out["rank"].to_numpy()))
    return out.take(rank_order).reset_index(drop=True)[COLLECTIVE_COLUMNS]


def _sources(values) -> "str | None":
    """The distinct non-null sources of a group's kernels, `+`-joined (None: none)."""
    found = sorted({v for v in values if v is not None and v == v})
    return "+".join(found) if found else None


def site_table(trace: Trace, kernels: pd.DataFrame) -> pd.DataFrame:
    """Per (kind, site): the communication kernels launched there (count, total_us), over all
    ranks; the site (sites.op_sites) of the host op holding the launch call, `(no host call)`
    when the trace has none."""
    from ..host.sites import op_sites
    from ..tree import host_tree
    node = kernels["launch_node"].to_numpy()
    site = np.full(len(kernels), "(no host call)", dtype=object)
    has = node >= 0
    if has.any():  # each launching op's site found and trimmed once
        uniq, inverse = np.unique(node[has], return_inverse=True)
        trimmed: dict[str, str] = {}  # the sites repeat: each distinct one trimmed once
        found = [trimmed[x] if x in trimmed else trimmed.setdefault(x, _trim(x))
                 for x in op_sites(trace, host_tree(trace).row[uniq])]
        site[has] = np.asarray(found, dtype=object)[inverse.ravel()]
    (kind, site), count, total = sorted_group_sums([kernels["kind"].to_numpy(dtype=object), site],
                                                   kernels["dur"].to_numpy())
    out = pd.DataFrame({"kind": kind, "site": site, "count": count, "total_us": total})
    return out.sort_values("total_us", ascending=False, ignore_index=True)[SITE_COLUMNS]


def _trim(site: str) -> str:
    """A site without its tail of c10d's own recording scopes (`record_param_comms`, `nccl:*`),
    which every collective has: the site ends at the c10d op the code called."""
    parts = site.split(" > ")
    while len(parts) > 1 and (parts[-1] == COMM_OP or parts[-1].startswith("nccl:")):
        parts.pop()
    return " > ".join(parts)


def overlap_table(trace: Trace) -> pd.DataFrame:
    """Per (rank, device) with communication: comm_us (union of its communication kernels),
    overlapped_us (the part of it during which a compute kernel, any other kernel, runs on the
    same device), exposed_us = comm_us - overlapped_us, overlap = overlapped_us / comm_us."""
    mask = comm_mask(trace)
    gpu = trace.gpu
    is_kernel = (gpu["cat"] == "kernel").to_numpy()
    ts, end = gpu["ts"].to_numpy(float), gpu["end"].to_numpy(float)
    rows = []
    for (rank, device), at in thread_groups(gpu, ("rank", "device")).items():
        comm = at[mask[at]]
        if not len(comm):
            continue
        compute = at[is_kernel[at] & ~mask[at]]
        cs, ce = merge_intervals(ts[comm], end[comm])
        ks, ke = merge_intervals(ts[compute], end[compute])
        comm_us = float((ce - cs).sum())
        overlapped = _covered_length(cs, ce, ks, ke)
        rows.append({"rank": rank, "device": device, "comm_us": comm_us, "overlapped_us": overlapped,
                     "exposed_us": comm_us - overlapped,
                     "overlap": overlapped / comm_us if comm_us > 0 else None})
    return pd.DataFrame(rows, columns=OVERLAP_COLUMNS)


def _covered_length(starts: np.ndarray, ends: np.ndarray, block_starts: np.ndarray,
                    block_ends: np.ndarray) -> float:
    """Length of the disjoint intervals [starts, ends) that the disjoint blocks cover."""
    if not len(block_starts):
        return 0.0
    inside = covered_before(block_starts, block_ends, ends) - covered_before(block_starts, block_ends, starts)
    return float(inside.sum())
