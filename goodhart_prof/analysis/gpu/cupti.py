"""CUPTI counters per kernel and per op (HTA's CUPTI counter analysis): the counters of each
`cuda_profiler_range` (trace/profiler_counters.py: one range per kernel when the profiler measures
per kernel), the kernel launch each range belongs to, and the op that launched it.

A trace recorded this way holds ranges instead of kernel events, without correlation ids: the
profiler serialises the kernels to count them, so the n-th range of a rank is its n-th kernel
launch (`cudaLaunchKernel` and the like, by start). Where the counts differ, no range is given
an op, and the note says so. FLOPs come from the SASS instruction counters
(`smsp__sass_thread_inst_executed_op_{f,h,d}{fma,mul,add}_pred_on.sum`: an FMA is 2 FLOPs, a mul
or add 1) when the trace has them. No FLOP/s is derived from them: a range's duration includes the
profiler's replay passes, not the kernel's own time. A counter that is itself a share of peak
(`..._pct_of_peak_...`) is shown as it is, achieved against peak.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...trace.model import Trace, in_categories, rows_named
from ...trace.profiler_counters import RANGE_CAT
from ..memo import derived
from ..tree import host_tree

SASS = re.compile(r"^smsp__sass_thread_inst_executed_op_(?P<prec>[hfd])(?P<kind>fma|mul|add)_pred_on\.sum$")
PRECISION = {"h": "fp16", "f": "fp32", "d": "fp64"}
LAUNCH = re.compile(r"^(?:cuda|hip|cu)(?:LaunchKernel|LaunchKernelExC|LaunchCooperativeKernel)(?:_v\d+)?$")


@dataclass
class CuptiCounters:
    counters: list[str]           # the counters recorded, as named
    ranges: int                   # ranges with counters
    matched: bool                 # each range paired with its kernel launch (and op)
    note: str                     # why not, when not
    kernels: pd.DataFrame = field(repr=False)  # name, ranges, flops (NaN: no SASS counters), each counter's sum
    ops: pd.DataFrame = field(repr=False)      # op, kernels, flops, each counter's sum (empty: not matched)
    # one row per range, by start: rank, ts, name, op (innermost), top_op (outermost), flops, counters
    per_range: pd.DataFrame = field(repr=False, default_factory=pd.DataFrame)
    flops_by_precision: dict[str, float] = field(default_factory=dict)


def cupti_counters(trace: Trace) -> CuptiCounters | None:
    """None without CUPTI counters."""
    return derived(trace, "cupti_counters", _cupti)


def _cupti(trace: Trace) -> CuptiCounters | None:
    c = trace.counters
    if c is None or c.empty:
        return None
    wide = c.pivot_table(index=["rank", "ts"], columns="counter", values="value", aggfunc="sum")
    counters = [str(x) for x in wide.columns]
    ev = trace.events
    at = np.flatnonzero(in_categories(ev["cat"], (RANGE_CAT,)))
    ranges = pd.DataFrame({"rank": ev["rank"].to_numpy()[at], "ts": ev["ts"].to_numpy(float)[at],
                           "name": ev["name"].iloc[at].astype(str).to_numpy()})
    ranges = ranges.merge(wide.reset_index(), on=["rank", "ts"], how="inner").sort_values(["rank", "ts"])
    ranges = ranges.reset_index(drop=True)
    flops, by_precision = _flops(ranges, counters)
    ranges["flops"] = flops
    ranges["op"], ranges["top_op"], matched, note = _ops(trace, ranges)
    kernels = _group(ranges, "name", counters)
    ops = _group(ranges[ranges["op"].notna()], "op", counters) if matched else _group(ranges.iloc[:0], "op", counters)
    return CuptiCounters(counters=counters, ranges=len(ranges), matched=matched, note=note, kernels=kernels,
                         ops=ops, per_range=ranges, flops_by_precision=by_precision)


def _flops(ranges: pd.DataFrame, counters: list[str]) -> tuple[np.ndarray, dict[str, float]]:
    sass = [(c, SASS.match(c)) for c in counters]
    sass = [(c, m) for c, m in sass if m]
    if not sass:
        return np.full(len(ranges), np.nan), {}
    total = np.zeros(len(ranges))
    by_precision: dict[str, float] = {}
    for c, m in sass:
        values = ranges[c].fillna(0).to_numpy(float) * (2 if m["kind"] == "fma" else 1)
        total += values
        name = PRECISION[m["prec"]]
        by_precision[name] = by_precision.get(name, 0.0) + float(values.sum())
    return total, by_precision


def _ops(trace: Trace, ranges: pd.DataFrame) -> tuple[list, list, bool, str]:
    """Per range, the innermost and the outermost op around its kernel launch (the n-th launch of
    its rank)."""
    ev = trace.events
    launches = ev.iloc[rows_named(ev, LAUNCH, ("cuda_runtime",))].sort_values(["rank", "ts"], kind="stable")
    for rank, part in ranges.groupby("rank", sort=True):
        mine = launches[launches["rank"].to_numpy() == rank]
        if len(mine) != len(part):
            return [None] * len(ranges), [None] * len(ranges), False, (f"rank {rank}: {len(part)} ranges but {len(mine)} kernel launches, so a range "
                                "cannot be paired with its launch and op")
    tree = host_tree(trace)
    nodes = tree.enclosing(launches["rank"].to_numpy(), launches["pid"].to_numpy(), launches["tid"].to_numpy(),
                           launches["ts"].to_numpy(float), launches["end"].to_numpy(float))
    op = tree.climb_to(nodes, tree.is_op & ~tree.is_step)
    top = np.where(nodes >= 0, tree.top_op[np.maximum(nodes, 0)], -1)
    names_of = np.asarray(tree.names, dtype=object)
    # ranges and launches are both sorted by rank, then start: the n-th of each pair up
    inner = [str(names_of[tree.name[o]]) if o >= 0 else None for o in op]
    outer = [str(names_of[tree.name[o]]) if o >= 0 else None for o in top]
    return inner, outer, True, ""


def _group(ranges: pd.DataFrame, key: str, counters: list[str]) -> pd.DataFrame:
    agg = {"ranges": (key, "size"), "flops": ("flops", lambda s: s.sum(min_count=1))}
    agg.update({c: (c, "sum") for c in counters})
    if ranges.empty:
        return pd.DataFrame(columns=[key, "ranges", "flops", *counters])
    table = ranges.groupby(key, sort=False).agg(**agg).reset_index()
    return table.sort_values(["flops", "ranges"], ascending=False, na_position="last").reset_index(drop=True)
