"""The hottest host ops: where the host threads spend their time, per cpu op name.

Read off the host call tree (analysis/tree/): each cpu op node's **self time** is its duration
less the union of the ops directly under it (`HostTree.self_us`). Per op name:

| column | meaning |
| --- | --- |
| name | the cpu op's name (`aten::addmm`, `cudaLaunchKernel` is not a cpu op) |
| calls | how many calls of it the trace holds (all threads, all ranks) |
| self_us | sum of its calls' self time |
| total_us | inclusive time: sum of the durations of its calls that no call of the same name on the same thread holds (a recursive `aten::to > aten::_to_copy > aten::to` counts once), so self_us <= total_us |
| self_pct | self_us / host_us x 100 |
| total_pct | total_us / host_us x 100 (a nested op's share is also its callers') |

**host time** (`host_us`): the sum of every op's self time, i.e. on each thread the time inside
at least one cpu op (where ops nest properly; the tree's parents keep a child inside its
parent), summed over threads and ranks. Host op time is work, summed over threads and ranks
like kernel time over streams and devices. `ProfilerStep#N` (a cpu op in 2021-era traces) is a
scope, not an op, and is left out. Order: self_us, largest first, then name.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...trace.model import Trace
from ..intervals import dense_codes, exact_sums, sorted_rows, stable_order
from ..tree import host_tree

COLUMNS = ["name", "calls", "self_us", "total_us", "self_pct", "total_pct"]


def hot_ops(trace: Trace) -> pd.DataFrame:
    """Every cpu op name with its calls, self and total time (module docstring), hottest first."""
    tree = host_tree(trace)
    ops = np.flatnonzero(tree.is_op & ~tree.is_step)
    if not len(ops):
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in
                             zip(COLUMNS, (object, np.int64, float, float, float, float))})
    self_us = tree.self_us[ops]
    dur = trace.events["dur"].loc[tree.row[ops]].to_numpy(float)  # as recorded (not end - ts)
    outer = _outermost_of_name(tree, ops)
    codes, inverse = dense_codes(tree.name[ops])
    sums = exact_sums(inverse, len(codes), self_us=self_us, total_us=np.where(outer, dur, 0.0))
    host_us = float(sums["self_us"].sum())
    share = 100.0 / host_us if host_us > 0 else float("nan")
    table = pd.DataFrame({"name": np.asarray(tree.names[codes], dtype=object),
                          "calls": np.bincount(inverse, minlength=len(codes)).astype(np.int64),
                          "self_us": sums["self_us"], "total_us": sums["total_us"],
                          "self_pct": sums["self_us"] * share, "total_pct": sums["total_us"] * share})
    return sorted_rows(table, ["self_us", "name"], [False, True])[COLUMNS]


def host_us(table: pd.DataFrame) -> float:
    """The host time the shares are of: the sum of the self times."""
    return float(table["self_us"].sum()) if len(table) else 0.0


def _outermost_of_name(tree, ops: np.ndarray) -> np.ndarray:
    """Whether each op call is not held by an earlier call of the same name on its thread (the
    tree order sorts a thread's nodes by start, longer first, so a holder comes before): its end
    is later than every earlier same-name call's on the thread. One running maximum over dense
    codes of (group, end), whose codes rise from group to group, serves every group at once."""
    # by thread and name, then tree order: the tree's threads are in (rank, pid, tid) order, so
    # one stable sort of (thread number, name code)
    spans = tree.spans
    thread = np.repeat(np.arange(len(spans)), spans.hi - spans.lo)[ops]
    key = thread * max(len(tree.names), 1) + tree.name[ops]
    order = stable_order(key)
    key = key[order]
    same = key[1:] == key[:-1]
    group = np.r_[0, np.cumsum(~same)]
    # (group, end) as one integer: ends as their ranks within the thread (the tree's end_rank)
    end_rank = tree.end_rank[ops][order]
    code = group * (int(end_rank.max()) + 1) + end_rank
    reach = np.maximum.accumulate(code)
    held = np.zeros(len(ops), dtype=bool)
    held[1:] = same & (code[1:] <= reach[:-1])
    out = np.ones(len(ops), dtype=bool)
    out[order[held]] = False
    return out
