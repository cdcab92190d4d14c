"""Setup: what a trace runs once before its loop, told apart from the iterations (docs/DESIGN.md
"Iterations and setup").

Per rank, setup runs from the rank's first event to
- the start of its first iteration (analysis/iterations.py: `ProfilerStep#N`, or inferred), or
- without iterations, the launch of its first kernel: before any kernel has run nothing is a
  step of a loop yet; what comes first is the CUDA context, module loads and the model's upload.
A rank with neither (no iterations, no kernel launch known) has no setup.

Per-iteration rules leave what starts inside setup out (rules/base.py `Context.points`, the copy
rules), and the reports show it apart (`Setup`): how long, the host-to-device copies launched in
it (count, bytes, GPU time), the runtime/driver calls of idle.py's kinds that ran in it (context
creation, module loads, allocations, frees, synchronisations, launches of 1 ms or more), and the
outermost host ops that took longest.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..trace.model import Trace
from .iterations import find_iterations
from .host.links import gpu_launches
from .memo import derived

TOP_OPS = 3


def setup_bounds(trace: Trace) -> pd.DataFrame:
    """Per rank with a setup: `rank`, `start` (its first event), `end` (module docstring) and
    `bound` ("first iteration" or "first kernel launch"). Cached on the trace."""
    return derived(trace, "setup_bounds", _bounds)


def _bounds(trace: Trace) -> pd.DataFrame:
    steps = find_iterations(trace).table
    if len(steps):
        first = steps.groupby("rank", sort=True)["ts"].min()
        bound = "first iteration"
    else:
        links = gpu_launches(trace)
        kernel = (trace.events["cat"].loc[links["gpu_row"].to_numpy()] == "kernel").to_numpy()
        known = links[kernel & (links["launch_row"].to_numpy() >= 0)]
        first = known.groupby("rank", sort=True)["launch_ts"].min()
        bound = "first kernel launch"
    ranks = first.index.to_numpy(np.int64)
    return pd.DataFrame({"rank": ranks, "start": _first_ts(trace.events, ranks),
                         "end": first.to_numpy(float), "bound": bound})


def _first_ts(ev: pd.DataFrame, ranks: np.ndarray) -> np.ndarray:
    """Each rank's earliest event start (NaN: none), as groupby("rank")["ts"].min() finds it;
    read off the rank-sorted events by one reduceat (a groupby of every event costs ms)."""
    rank, ts = ev["rank"].to_numpy(np.int64), ev["ts"].to_numpy(float)
    if len(rank) and not (rank[1:] >= rank[:-1]).all():  # not in rank order (a table built by hand)
        return ev.groupby("rank", sort=True)["ts"].min().reindex(ranks).to_numpy(float)
    starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]]) if len(rank) else np.zeros(0, dtype=np.int64)
    mins = np.fmin.reduceat(ts, starts) if len(starts) else np.zeros(0)
    at = np.minimum(np.searchsorted(rank[starts], ranks), max(len(starts) - 1, 0))
    found = (at < len(starts)) & (rank[starts][at] == ranks) if len(starts) else np.zeros(len(ranks), bool)
    return np.where(found, mins[at] if len(starts) else np.nan, np.nan)


def in_setup(trace: Trace, rank, ts) -> np.ndarray:
    """Whether each (rank, time) lies in its rank's setup (before its end; False on ranks
    without one)."""
    rank = np.asarray(rank, dtype=np.int64)
    if not len(rank):
        return np.zeros(0, dtype=bool)
    b = setup_bounds(trace)
    ends = dict(zip(b["rank"].tolist(), b["end"].tolist()))
    u, inv = np.unique(rank, return_inverse=True)
    limit = np.array([ends.get(int(r), -np.inf) for r in u.tolist()])
    return np.asarray(ts, dtype=float) < limit[inv.ravel()]


def drop_setup(trace: Trace, points: pd.DataFrame, time_col: str = "ts") -> pd.DataFrame:
    """The rows of `points` (with `rank` and `time_col`) that do not start in setup."""
    if points.empty:
        return points
    return points[~in_setup(trace, points["rank"].to_numpy(), points[time_col].to_numpy(float))]


@dataclass
class Setup:
    """The setup of each rank (module docstring): `ranks` one row per rank (rank, start, end,
    dur_us, bound, htod_copies, htod_bytes, htod_gpu_us); `calls` the runtime calls in it per
    (kind, name): count, total_us; `ops` the outermost host ops that took longest: name, total_us."""

    ranks: pd.DataFrame
    calls: list[dict[str, Any]] = field(default_factory=list)
    ops: list[dict[str, Any]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.ranks.empty


def setup(trace: Trace) -> Setup:
    """The trace's Setup (module docstring), built once per trace (memo.py)."""
    return derived(trace, "setup", _setup)


def _setup(trace: Trace) -> Setup:
    b = setup_bounds(trace)
    if b.empty:
        return Setup(b.assign(dur_us=[], htod_copies=[], htod_bytes=[], htod_gpu_us=[]))
    links = gpu_launches(trace)
    gpu = trace.gpu
    htod = gpu["name"].astype(str).str.startswith("Memcpy HtoD").to_numpy() if len(gpu) else np.zeros(0, bool)
    # in trace.gpu's row order, as gpu_launches is; a copy whose launch is unknown counts by its own start
    when = np.where(links["launch_row"].to_numpy() >= 0, links["launch_ts"].to_numpy(float),
                    links["ts"].to_numpy(float))
    copies = htod & in_setup(trace, links["rank"].to_numpy(), when)
    rank = links["rank"].to_numpy(np.int64)[copies]
    nbytes = gpu["bytes"].to_numpy(float)[copies]
    dur = gpu["dur"].to_numpy(float)[copies]
    per = pd.DataFrame({"rank": rank, "n": 1, "bytes": np.nan_to_num(nbytes), "us": dur}) \
        .groupby("rank").sum().reindex(b["rank"].to_numpy(), fill_value=0)
    ranks = b.assign(dur_us=b["end"] - b["start"], htod_copies=per["n"].to_numpy(np.int64),
                     htod_bytes=per["bytes"].to_numpy(float), htod_gpu_us=per["us"].to_numpy(float))
    return Setup(ranks, _calls(trace), _ops(trace))


def _calls(trace: Trace) -> list[dict[str, Any]]:
    """The runtime calls of idle.py's kinds that start in setup, per (kind, name), longest first."""
    from .gpu.host_segments import KINDS, runtime_calls
    from .tree import host_tree
    tree = host_tree(trace)
    ts, end, code, kind, lo, hi = runtime_calls(trace, tree)
    if not len(ts):
        return []
    thread = np.repeat(np.arange(len(lo)), hi - lo)
    mine = in_setup(trace, tree.spans.rank[thread], ts)
    if not mine.any():
        return []
    df = pd.DataFrame({"kind": np.asarray(KINDS, dtype=object)[kind[mine]],
                       "name": tree.names[code[mine]].astype(str), "us": (end - ts)[mine]})
    g = df.groupby(["kind", "name"], sort=True)["us"].agg(["size", "sum"]).reset_index()
    g = g.sort_values(["sum", "kind", "name"], ascending=[False, True, True], kind="stable")
    return [{"kind": str(r.kind), "name": str(r.name), "count": int(r.size), "total_us": round(float(r.sum), 3)}
            for r in g.itertuples(index=False)]


def _ops(trace: Trace) -> list[dict[str, Any]]:
    """The outermost host ops starting in setup, by name, longest total first (TOP_OPS)."""
    from .tree import host_tree
    tree = host_tree(trace)
    top = np.flatnonzero((tree.top_op == np.arange(len(tree))) & tree.is_op & ~tree.is_step) \
        if len(tree) else np.zeros(0, dtype=np.int64)
    top = top[in_setup(trace, tree.rank[top], tree.ts[top])]
    if not len(top):
        return []
    df = pd.DataFrame({"name": tree.names[tree.name[top]].astype(str), "us": tree.end[top] - tree.ts[top]})
    g = df.groupby("name", sort=True)["us"].agg(["size", "sum"]).reset_index()
    g = g.sort_values(["sum", "name"], ascending=[False, True], kind="stable").head(TOP_OPS)
    return [{"name": str(r.name), "count": int(r.size), "total_us": round(float(r.sum), 3)}
            for r in g.itertuples(index=False)]
