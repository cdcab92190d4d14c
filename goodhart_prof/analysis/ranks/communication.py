"""Communication per rank: the collectives each device ran (NCCL/RCCL kernels), their time, what
they moved where the trace records it, and how much of their time compute kernels overlapped.

A communication kernel is a kernel of category `communication` (kernels.py). Its **kind** is the
collective the host called, read from the ops around its launch call: the `Collective name` of
the enclosing `record_param_comms` (or of the kernel itself, newer Kineto), else the name of the
enclosing `c10d::*` op or `nccl:*` annotation (NCCL runs an all_to_all as SendRecv kernels: the op
says all_to_all); failing both, the kernel's own name (`ncclKernel_AllReduce_*`); else `other`.

**Message size** S (bytes) = max(`In msg nelems`, `Out msg nelems`) x the element size of
`dtype`, from the kernel's args, else from its `record_param_comms` when that op launched this one
communication kernel only (`size_source` `args`). The larger of the two counts is nccl-tests' S
for every kind (all_gather: the gathered output; reduce_scatter: the full input; the others move as
much as they take). Where no args say it (c10d before PyTorch 2.1 records none), S is read off the
shapes (`size_source` `shapes`): the largest tensor operand (`Input Dims` x the element size of its
`Input type`) of the innermost `c10d::*` op and `nccl:*` annotation holding the launch, each when
it holds this one communication kernel only (`c10d::_allgather_base_` records the gathered output,
`nccl:all_to_all` the buffer sent); an all_gather known only by its `nccl:*` input is that shard
times the group size.
**Group size** n: `Group size` from the args; else, with the ranks side by side
(stragglers.py), the job's `distributedInfo.world_size` W for a collective that all W ranks ran
together (matched and ending together): its group is the whole job (`group_source`
`all ranks`). Where a size, its dtype or the group size is not known, the figures that need it are
null: never a guess.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ...trace.model import Trace, comm_arg_table
from ...units import ELEMENT_BYTES
from ..gpu.kernels import comm_mask
from ..intervals import (covered_before, exact_sums, first_positions, merge_intervals, occurs_once,
                        sorted_group_sums, thread_groups, tuple_codes)
from ..memo import derived

if TYPE_CHECKING:
    from .stragglers import Ranks

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv", "other")

# The collective the host called (`Collective name`, a c10d op, an nccl: annotation), in order.
_CALLED = (("reduce_scatter", r"reduce_?scatter"), ("all_gather", r"all_?gather"),
           ("all_reduce", r"all_?reduce"), ("all_to_all", r"all_?to_?all"),
           ("broadcast", r"broadcast"), ("send_recv", r"^(c10d::|nccl:)?_?(send|recv)"))
# NCCL/RCCL kernel names: ncclKernel_<Primitive>_..., ncclDevKernel_<Primitive>_...
_KERNEL = (("reduce_scatter", r"reducescatter"), ("all_gather", r"allgather"),
           ("all_reduce", r"allreduce"), ("all_to_all", r"alltoall"), ("broadcast", r"broadcast"),
           ("send_recv", r"sendrecv|kernel_send|kernel_recv"))
_COLLECTIVE_OP = re.compile(r"^(?:c10d::|nccl:)")
COMM_OP = "record_param_comms"

_CALL_PREFIXES = ("c10d::", "nccl:")

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


def has_communication(trace: Trace) -> bool:
    return not trace.gpu.empty and bool(comm_mask(trace).any())


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


def _first_match(texts: pd.Index, rules) -> np.ndarray:
    """For each distinct text, the kind of the first rule that matches it (None: none)."""
    compiled = [(kind, re.compile(p, re.IGNORECASE)) for kind, p in rules]
    return np.array([next((k for k, p in compiled if p.search(str(t))), None) for t in texts],
                    dtype=object)


def _kinds_of(values: pd.Series, rules) -> np.ndarray:
    """_first_match of each value, tested once per distinct value (None where missing)."""
    codes, uniques = pd.factorize(values.astype(object))
    kinds = np.append(_first_match(pd.Index(uniques), rules), None)
    return kinds[codes].astype(object)  # code -1 (missing): the appended None


def comm_kernels(trace: Trace) -> pd.DataFrame:
    """_comm_kernels of the trace, built once per trace (memo.py) (communication and the rank
    tables both read it)."""
    return derived(trace, "comm_kernels", _comm_kernels)


def _comm_kernels(trace: Trace) -> pd.DataFrame:
    """One row per communication kernel: rank, device, ts, end, dur, kind, bytes (S; NaN when
    unknown), size_source (`args`, `shapes`; None), shard_bytes (an all_gather's input when only
    that is known, else NaN), group_size (NaN when unknown), group_source (`args`; None),
    process_group (its `Process Group Name`, None when
    not recorded), launch_ts (its launch call's start; NaN without one) and iteration (N of the
    `ProfilerStep#N` holding that launch call; -1: none), launch_node (the host tree node holding
    the launch call; -1: none)."""
    from ..host.links import gpu_launches
    from ..iterations import iterations
    mask = comm_mask(trace)
    gpu = trace.gpu.iloc[np.flatnonzero(mask)]
    links = gpu_launches(trace).iloc[np.flatnonzero(mask)]
    launched = links["launch_row"].to_numpy() >= 0
    launch_ts = np.where(launched, links["launch_ts"].to_numpy(float), np.nan)
    iteration = np.full(len(links), -1, dtype=np.int64)
    iteration[launched] = iterations(trace, links["rank"].to_numpy()[launched], launch_ts[launched])
    nodes = _launch_nodes(trace, mask)
    args = _kernel_args(trace, mask, nodes)
    called = _called_kind(trace, nodes)
    own = _kinds_of(gpu["name"], _KERNEL)
    from_args = _kinds_of(args["collective"], _CALLED)
    kind = np.where(pd.notna(from_args), from_args, np.where(pd.notna(called), called, own))
    kind = np.where(pd.notna(kind), kind, "other").astype(object)
    size = _element_bytes(args["dtype"]) * np.fmax(args["in_nelems"].to_numpy(),
                                                   args["out_nelems"].to_numpy())
    group = args["group_size"].to_numpy(float)
    op_bytes, note_bytes = _call_bytes(trace, nodes)
    gathered = kind == "all_gather"
    shard = np.where(gathered & np.isnan(op_bytes), note_bytes, np.nan)  # a gather's own input
    from_shapes = np.where(gathered & np.isnan(op_bytes), shard * group, np.fmax(op_bytes, note_bytes))
    source = np.where(~np.isnan(size), "args", np.where(~np.isnan(from_shapes), "shapes", None))
    return pd.DataFrame({"rank": gpu["rank"].to_numpy(), "device": gpu["device"].to_numpy(),
                         "ts": gpu["ts"].to_numpy(), "end": gpu["end"].to_numpy(),
                         "dur": gpu["dur"].to_numpy(), "kind": kind,
                         "bytes": np.where(np.isnan(size), from_shapes, size),
                         "shard_bytes": shard, "size_source": source.astype(object),
                         "group_size": group,
                         "group_source": np.where(np.isnan(group), None, "args").astype(object),
                         "process_group": args["process_group"].to_numpy(dtype=object),
                         "launch_ts": launch_ts, "iteration": iteration, "launch_node": nodes})


def _call_bytes(trace: Trace, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per launch node, the largest tensor operand in bytes of the innermost `c10d::*` op and of
    the innermost `nccl:*` annotation (or op) holding it, each only when it holds this one
    communication kernel; NaN where none is sized."""
    from ..tree import host_tree
    out = (np.full(len(nodes), np.nan), np.full(len(nodes), np.nan))
    if not (nodes >= 0).any():
        return out
    tree = host_tree(trace)
    names = tree.texts
    ev = trace.events
    for i, prefix in enumerate(_CALL_PREFIXES):
        call = tree.climb_to(nodes, np.array([n.startswith(prefix) for n in names], dtype=bool)[tree.name])
        alone = occurs_once(call)
        if not alone.any():
            continue
        rows = ev.index.get_indexer(tree.row[call[alone]])
        out[i][alone] = _operand_bytes(ev["input_types"], ev["input_dims"], rows)
    return out


def _operand_bytes(types: pd.Series, dims: pd.Series, rows: np.ndarray) -> np.ndarray:
    """The largest plain tensor operand (`Input Dims` sizes x its `Input type`'s element size)
    of each row, NaN where none is both shaped and typed; each distinct pair computed once."""
    t, d = types.cat.codes.to_numpy()[rows], dims.cat.codes.to_numpy()[rows]
    codes = tuple_codes(t, d)
    first = first_positions(codes)
    tl, dl = types.cat.categories, dims.cat.categories
    values = np.array([_largest(tl[a] if a >= 0 else "", dl[b] if b >= 0 else "")
                       for a, b in zip(t[first].tolist(), d[first].tolist())], dtype=float)
    return values[codes]


def _largest(types: str, dims: str) -> float:
    best = np.nan
    for t, d in zip(types.split(", "), dims.split(", ")):
        size = ELEMENT_BYTES.get(t)  # `Input type`'s C++ names (units.py)
        if size is None or not d or d == "?":
            continue
        best = np.fmax(best, float(np.prod([int(x) for x in d.split("x")], dtype=float)) * size)
    return float(best)


def _element_bytes(dtype: pd.Series) -> np.ndarray:
    return dtype.map(ELEMENT_BYTES).to_numpy(dtype=float, na_value=np.nan)  # c10 ScalarType names


def _launch_nodes(trace: Trace, mask: np.ndarray) -> np.ndarray:
    """The host tree node holding each communication kernel's launch call (-1: none)."""
    from ..host.links import gpu_launches
    from ..tree import host_tree
    links = gpu_launches(trace).iloc[np.flatnonzero(mask)]
    node = np.full(len(links), -1, dtype=np.int64)
    has = links["launch_row"].to_numpy() >= 0
    tree = host_tree(trace)
    if has.any() and len(tree):
        node[has] = tree.enclosing(*(links[c].to_numpy()[has] for c in
                                     ("rank", "pid", "tid", "launch_ts", "launch_end")))
    return node


def _called_kind(trace: Trace, nodes: np.ndarray) -> np.ndarray:
    """The kind named by the innermost c10d:: op or nccl: annotation around each launch."""
    from ..tree import host_tree
    if not (nodes >= 0).any():
        return np.full(len(nodes), None, dtype=object)
    tree = host_tree(trace)
    names = tree.texts
    is_collective = np.array([bool(_COLLECTIVE_OP.search(n)) for n in names], dtype=bool)[tree.name]
    op = tree.climb_to(nodes, is_collective)
    kinds = _first_match(names, _CALLED)
    return np.where(op >= 0, kinds[tree.name[np.maximum(op, 0)]], None)


def _kernel_args(trace: Trace, mask: np.ndarray, nodes: np.ndarray) -> pd.DataFrame:
    """comm_arg_table columns for each communication kernel: its own args, else those of the
    record_param_comms holding its launch when that op launched no other communication kernel."""
    ev = trace.events
    codes = ev["comm_args"].cat.codes.to_numpy()
    table = comm_arg_table(ev["comm_args"].cat.categories)
    own = codes[ev.index.get_indexer(trace.gpu.index[mask])]
    from_op = _op_arg_codes(trace, nodes)
    pick = np.where(own >= 0, own, from_op)
    out = table.reindex(np.where(pick >= 0, pick, len(table))).reset_index(drop=True)
    return out


def _op_arg_codes(trace: Trace, nodes: np.ndarray) -> np.ndarray:
    """The comm_args code of the record_param_comms holding each launch node, when that op
    launched only this one communication kernel (its size is then this kernel's); -1 otherwise."""
    from ..tree import host_tree
    out = np.full(len(nodes), -1, dtype=np.int64)
    if not (nodes >= 0).any():
        return out
    tree = host_tree(trace)
    is_op = np.array([n == COMM_OP for n in tree.texts], dtype=bool)[tree.name]
    op = tree.climb_to(nodes, is_op)
    alone = occurs_once(op)
    ev = trace.events
    rows = ev.index.get_indexer(tree.row[op[alone]])
    out[alone] = ev["comm_args"].cat.codes.to_numpy()[rows]
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
