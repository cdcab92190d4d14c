"""The iterations of a trace, and how they were found (docs/DESIGN.md "Iterations and setup").

One home for "the iterations": every per-iteration figure (phases, savings basis, sync and copy
rates, memory, noise, stragglers) reads this table, through `step_table` (and `iterations`: the iteration of each time).

- **marked**: the trace has `ProfilerStep#N` events (torch.profiler's `step()`): one row per
  host-side step, as recorded (several rows per (rank, N) where a 2021-era trace records both
  a cpu op and an annotation).
- **inferred** (no `ProfilerStep#N` anywhere in the trace): from a host marker that repeats, by
  family in this order, the first family with a name that occurs at least twice on some rank:
  1. `Optimizer.step#...` (the optimizer's step annotation): a boundary at each one's **end**
     (a training step ends with its optimizer step);
  2. `DataLoader.__next__` (`enumerate(DataLoader)#...__next__`): a boundary at each **start**
     (a step begins by fetching its batch);
  3. `## name ##` annotations (Hugging Face / Lightning / torch.compile style) at the top of the
     host call tree only (inside no other op or annotation): at each start. One nested in a
     larger call is a part of that call (vLLM's `## Call CompiledFxGraph ##` runs once per layer
     inside one `capture_8192_PIECEWISE`), not a step of a loop.
  Within the family the name found on the most ranks wins, then the most regular spacing (the
  lowest coefficient of variation of the intervals between consecutive boundaries, over ranks),
  then the name. Only the outermost instances count (one nested in another of the same name on
  its thread is part of it). On each rank with n >= 2 boundaries, iteration k (1 <= k < n) runs
  from boundary k-1 to boundary k: n boundaries make n - 1 iterations, numbered from 1. What runs
  before the first boundary is setup: with boundaries at the markers' ends (optimizer, backward)
  that is the first step itself (first launches, warm-up: iteration 0, not counted).
  4. the backward pass, where none of these repeats: runs of consecutive top-level
     `autograd::engine::...` nodes (any thread of the rank, in start order; any other top-level
     node ends a run), a boundary at each run's end.
- **none**: neither; per-iteration figures are over the whole trace and rules that need
  iterations say so.

What runs before the first iteration is setup (analysis/setup.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..trace.model import Trace
from .intervals import segment_searchsorted
from .tree.host import host_tree, profiler_steps
from .memo import derived

COLUMNS = ["rank", "step", "ts", "end", "dur"]
MARKED = "ProfilerStep#N"

# The inferred families, in order: (family, pattern, boundary at the marker's "end" or "start").
FAMILIES = (
    ("optimizer", re.compile(r"^Optimizer\.step#\w+\.step$"), "end"),
    ("dataloader", re.compile(r"^enumerate\(DataLoader\)#\w*\.__next__$|DataLoader\w*\.__next__$"), "start"),
    ("annotation", re.compile(r"^## .+ ##$"), "start"),
)


@dataclass(frozen=True)
class Iterations:
    """The iteration table (`COLUMNS`, plus the events' own columns when marked) and how it was
    found: `how` "marked", "inferred" or "none"; `marker` the name they were found from
    (`ProfilerStep#N`, or the repeating name), None when none; `boundary` "start" or "end" of the
    marker for inferred ones."""

    table: pd.DataFrame
    how: str
    marker: str | None = None
    boundary: str | None = None

    @property
    def count(self) -> int:
        """Distinct iteration numbers (over ranks)."""
        return int(self.table["step"].nunique()) if len(self.table) else 0

    def describe(self) -> str:
        """How the reports say it: `12 iterations (ProfilerStep#N)`, `11 iterations inferred from
        Optimizer.step#SGD.step (from one end of it to the next)`, or that none were found."""
        if self.how == "marked":
            return f"{self.count} iteration(s) ({MARKED})"
        if self.how == "inferred":
            return (f"{self.count} iteration(s) inferred from {self.marker} (from one "
                    f"{self.boundary} of it to the next; what runs before the first is setup)")
        return ("no iterations found (no ProfilerStep#N, and nothing that repeats: no "
                "Optimizer.step#, DataLoader.__next__, top-level ## name ## or backward pass twice): "
                "figures are over the whole trace")


def find_iterations(trace: Trace) -> Iterations:
    """The trace's iterations (module docstring), found once per trace (memo.py)."""
    return derived(trace, "iterations", _find)


def _find(trace: Trace) -> Iterations:
    marked = profiler_steps(trace.events)
    if len(marked):
        return Iterations(marked, "marked", MARKED, "start")
    tree = host_tree(trace)
    names = pd.Series(tree.names, dtype=object).astype(str)
    top = None  # nodes at the top of the tree, found once when an annotation name is a candidate
    for family, pattern, boundary in FAMILIES:
        codes = np.flatnonzero(names.str.contains(pattern.pattern, regex=True).to_numpy(bool))
        best = None
        if family == "annotation" and len(codes):
            top = tree.nearest(~tree.is_step) < 0
        for code in codes.tolist():
            bounds = _boundaries(tree, code, boundary, top if family == "annotation" else None)
            if not bounds:
                continue
            key = (-len(bounds), _spacing_cv(bounds), names[code])
            if best is None or key < best[0]:
                best = (key, names[code], bounds)
        if best is not None:
            return Iterations(_table(best[2]), "inferred", best[1], boundary)
    passes = _backward_passes(tree, names)
    if passes:
        return Iterations(_table(passes), "inferred", BACKWARD_PASS, "end")
    return Iterations(_empty(), "none")


BACKWARD_PASS = "the backward pass (autograd::engine)"
_ENGINE = re.compile(r"^autograd::engine::")


def _backward_passes(tree, names: pd.Series) -> dict[int, np.ndarray]:
    """Per rank with at least 2, the ends of its backward passes: runs of consecutive top-level
    host nodes (any thread of the rank, in start order) that are the autograd engine's
    (`autograd::engine::evaluate_function: ...`), broken by any other top-level node (the next
    forward, the optimizer). A step ends with its backward (and the optimizer after it, which
    opens the next run's gap)."""
    engine = names.str.contains(_ENGINE.pattern, regex=True).to_numpy(bool)
    top = np.flatnonzero((tree.depth == 0) & ~tree.is_step) if len(tree) else np.zeros(0, np.int64)
    if not len(top) or not engine[tree.name[top]].any():
        return {}
    top = top[np.lexsort((tree.ts[top], tree.rank[top]))]
    rank, is_bwd = tree.rank[top], engine[tree.name[top]]
    new_rank = np.r_[True, rank[1:] != rank[:-1]]
    last = np.r_[is_bwd[:-1] & ~(is_bwd[1:] & ~new_rank[1:]), is_bwd[-1]]  # a run's last node
    reach = pd.Series(tree.end[top]).groupby(np.cumsum(~is_bwd | new_rank)).cummax().to_numpy()
    out = {}
    for r in np.unique(rank[last]).tolist():
        ends = np.sort(reach[last & (rank == r)])
        if len(ends) >= 2:
            out[int(r)] = ends
    return out


def _boundaries(tree, code: int, boundary: str, top: np.ndarray | None = None) -> dict[int, np.ndarray]:
    """Per rank with at least 2, the sorted boundary times of the outermost instances of a name
    (with `top`, only the nodes it marks: those inside no op or annotation but ProfilerStep#N)."""
    nodes = np.flatnonzero(tree.name == code)
    nodes = nodes[~tree.is_step[nodes]] if len(nodes) else nodes
    if top is not None and len(nodes):
        nodes = nodes[top[nodes]]
    out = {}
    rank = tree.rank[nodes]
    for r in np.unique(rank).tolist():
        mine = nodes[rank == r]
        mine = mine[np.lexsort((-(tree.end[mine] - tree.ts[mine]), tree.ts[mine]))]
        ts, end = tree.ts[mine], tree.end[mine]
        # outermost: an instance starting before an earlier one (any thread of the rank) ends is
        # inside it (the same name nested, or a second thread doing the same at once)
        reach = np.maximum.accumulate(end)
        keep = np.r_[True, ts[1:] >= reach[:-1]]
        times = np.sort((end if boundary == "end" else ts)[keep])
        if len(times) >= 2:
            out[int(r)] = times
    return out


def _spacing_cv(bounds: dict[int, np.ndarray]) -> float:
    """Coefficient of variation of the intervals between consecutive boundaries, all ranks."""
    gaps = np.concatenate([np.diff(t) for t in bounds.values()])
    mean = float(gaps.mean()) if len(gaps) else 0.0
    return float(gaps.std() / mean) if mean > 0 else float("inf")


def _table(bounds: dict[int, np.ndarray]) -> pd.DataFrame:
    parts = []
    for r, times in sorted(bounds.items()):
        ts, end = times[:-1], times[1:]
        parts.append(pd.DataFrame({"rank": np.full(len(ts), r, dtype=np.int64),
                                   "step": np.arange(1, len(times), dtype=np.int64),
                                   "ts": ts, "end": end, "dur": end - ts}))
    return pd.concat(parts, ignore_index=True)[COLUMNS] if parts else _empty()


def _empty() -> pd.DataFrame:
    return pd.DataFrame({"rank": pd.Series(dtype=np.int64), "step": pd.Series(dtype=np.int64),
                         "ts": pd.Series(dtype=float), "end": pd.Series(dtype=float),
                         "dur": pd.Series(dtype=float)})



@dataclass(frozen=True)
class StepWindows:
    """The steps' bounds per rank, as disjoint sorted windows: rank `ranks[i]`'s are
    [bounds[i], bounds[i+1]) of starts/ends. A step's window runs from its host start to its
    end, or to the end of the last GPU activity launched inside it when that is later (the
    device finishes the step's work after the host has moved on)."""

    ranks: np.ndarray
    bounds: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    def of_each(self, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The windows of each of `ranks` (one entry per device, say), all at once: (owner,
        starts, ends), owner the position in `ranks` each window belongs to, owners ascending."""
        ranks = np.asarray(ranks, dtype=np.int64)
        if not len(self.ranks) or not len(ranks):
            return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0)
        at = np.minimum(np.searchsorted(self.ranks, ranks), len(self.ranks) - 1)
        has = self.ranks[at] == ranks
        lo = np.where(has, self.bounds[at], 0)
        count = np.where(has, self.bounds[at + 1] - lo, 0)
        owner = np.repeat(np.arange(len(ranks)), count)
        q = lo[owner] + np.arange(len(owner)) - np.repeat(np.cumsum(count) - count, count)
        return owner, self.starts[q], self.ends[q]


def step_windows(trace: Trace) -> StepWindows:
    """The trace's StepWindows (empty without iterations), built once per trace (memo.py)."""
    return derived(trace, "step_windows", _step_windows)


def _step_windows(trace: Trace) -> StepWindows:
    from .intervals import first_positions, segment_merge, tuple_codes
    from .host.links import gpu_launches
    steps = find_iterations(trace).table
    if steps.empty:
        return StepWindows(np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0), np.zeros(0))
    # per (rank, step), in (rank, step) order: its rows' first start and last end (NaN skipped)
    r, s = steps["rank"].to_numpy(np.int64), steps["step"].to_numpy(np.int64)
    group = tuple_codes(r, s)
    n = int(group.max()) + 1
    ts, end = np.full(n, np.nan), np.full(n, np.nan)
    np.fmin.at(ts, group, steps["ts"].to_numpy(float))
    np.fmax.at(end, group, steps["end"].to_numpy(float))
    first = first_positions(group)
    rank, g_step = r[first], s[first]
    links = gpu_launches(trace)
    known = links["launch_row"].to_numpy() >= 0
    l_rank = links["rank"].to_numpy(np.int64)[known]
    step = iterations(trace, l_rank, links["launch_ts"].to_numpy(float)[known])
    inside = step >= 0
    codes = tuple_codes(np.r_[rank, l_rank[inside]], np.r_[g_step, step[inside]])
    slot = np.full(int(codes.max()) + 1, -1, dtype=np.int64)
    slot[codes[:n]] = np.arange(n)
    at = slot[codes[n:]]
    ok = at >= 0
    np.maximum.at(end, at[ok], links["end"].to_numpy(float)[known][inside][ok])
    order = np.lexsort((ts, rank))
    rank, ts, end = rank[order], ts[order], end[order]
    first = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
    bounds = np.r_[first, len(rank)].astype(np.int64)
    starts, ends, wb = segment_merge(ts, end, bounds)
    return StepWindows(rank[first], np.asarray(wb, dtype=np.int64), starts, ends)


def step_table(trace: Trace) -> pd.DataFrame:
    """The trace's iterations (analysis/iterations.py: its `ProfilerStep#N`, else inferred from
    what repeats), found once per trace: rank, step, ts, end, dur per (rank, step)."""
    return find_iterations(trace).table


def iterations(trace: Trace, rank: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """N of the iteration (step_table: ProfilerStep#N, or inferred) on the same rank (any thread)
    whose interval holds ts, else -1."""
    out = np.full(len(ts), -1, dtype=np.int64)
    steps = step_table(trace)
    s_rank, s_ts, s_end, s_step = (steps[c].to_numpy() for c in ("rank", "ts", "end", "step"))
    if not len(s_rank) or not len(ts):
        return out
    # the steps by rank, then start (ties: table order); each query searches its rank's steps,
    # all ranks in one segment_searchsorted (a pass over every ts per rank was quadratic: 20,000
    # ranks; a sort of all the query times cost more than the search)
    order = np.lexsort((s_ts, s_rank))
    s_rank_sorted = s_rank[order].astype(np.int64)
    rank = np.asarray(rank, dtype=np.int64)
    lo = np.searchsorted(s_rank_sorted, rank, side="left")
    hi = np.searchsorted(s_rank_sorted, rank, side="right")
    j = segment_searchsorted(np.asarray(s_ts, dtype=float)[order], lo, hi, np.asarray(ts, dtype=float),
                             side="right") - 1
    at = order[np.maximum(j, 0)]
    ok = (j >= lo) & (ts <= s_end[at])
    out[ok] = s_step[at[ok]]
    return out
