"""Phases: per annotation name and per traced iteration, CPU time, GPU time launched, sync points.

Two tables (docs/DESIGN.md "phases"):

`phases_by_rank`: one row per rank and phase, never summed across ranks:

- kind `annotation`: one row per (rank, `user_annotation` name) (`record_function` labels such
  as `rollout`), over all the rank's iterations, iteration -1.
- kind `iteration`: one row per (rank, iteration N) of analysis/iterations.py: named
  `ProfilerStep#N` where the trace marks them, `iteration#N` where they were inferred.

Columns: rank, name, kind, iteration, count (annotation instances on the rank), cpu_us (sum of
their durations), gpu_us (sum of durations of GPU activity -- kernels, memcpys, memsets -- whose
launch call starts inside an instance), gpu_kernels (how many of those are kernels), syncs (sync
points whose host call starts inside an instance).

`phases` (`over_ranks` of the above): one row per phase. Wall times of different ranks run at
the same time, so adding them says nothing (two ranks' 0.6 s steps are not a 1.2 s step): the
row is the **median rank's** row (the rank whose cpu_us is the median among the ranks that have
the phase; the lower of the two middle ones for an even count), every figure that one rank's,
and beside it `ranks` (how many ranks have the phase), `median_rank`, `cpu_max_us` and
`max_rank` (the slowest rank's CPU time and that rank; ties: the lowest rank). On a single rank
the row is that rank's and the extra columns repeat it.

"Inside" for an annotation means on the same rank/pid/tid: `record_function` scopes are
per-thread, so work another thread does meanwhile is not the annotation's. (On CUDA the autograd
engine runs backward on its own thread, so a phase that calls `.backward()` shows the forward
launches only.) For a `ProfilerStep#N` it means anywhere on the rank: an iteration owns all the
work its rank does during it, backward thread and logging thread included.

Order of `phases`: annotations by cpu_us (largest first), then the iterations in step order.
Order of `phases_by_rank`: annotations by (rank, name), then iterations by (rank, N).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..trace.model import Trace, name_codes
from .intervals import exact_sums, tuple_codes
from .iterations import find_iterations
from .links import gpu_launches
from .tree import STEP, step_table, sums_inside

RANK_COLUMNS = ["rank", "name", "kind", "iteration", "count", "cpu_us", "gpu_us", "gpu_kernels",
                "syncs"]
COLUMNS = ["name", "kind", "iteration", "count", "cpu_us", "gpu_us", "gpu_kernels", "syncs",
           "ranks", "median_rank", "cpu_max_us", "max_rank"]
_TYPES = {"rank": np.int64, "name": object, "kind": object, "iteration": np.int64,
          "count": np.int64, "cpu_us": float, "gpu_us": float, "gpu_kernels": np.int64,
          "syncs": np.int64, "ranks": np.int64, "median_rank": np.int64, "cpu_max_us": float,
          "max_rank": np.int64}


def phases(trace: Trace, points: pd.DataFrame) -> pd.DataFrame:
    """The phase table over ranks (module docstring); `points` is the trace's sync points."""
    return over_ranks(phases_by_rank(trace, points))


def phases_by_rank(trace: Trace, points: pd.DataFrame) -> pd.DataFrame:
    """One row per (rank, phase) (module docstring); `points` is the trace's sync points."""
    ev = trace.events
    name_codes_all = ev["name"].cat.codes.to_numpy()
    at = np.flatnonzero((ev["cat"] == "user_annotation").to_numpy())
    at = at[~np.isin(name_codes_all[at], name_codes(ev, STEP))]
    ann = pd.DataFrame({c: ev[c].to_numpy()[at] for c in ("rank", "pid", "tid", "ts", "end", "dur")})
    steps = step_table(trace)
    launches = gpu_launches(trace)
    launches = launches[launches["launch_row"].to_numpy() >= 0]
    gpu_us = launches["dur"].to_numpy()
    is_kernel = (ev["cat"].loc[launches["gpu_row"].to_numpy()] == "kernel").to_numpy(float)

    thread = ("rank", "pid", "tid")
    ann_gpu, ann_kernels = sums_inside(ann, launches, "launch_ts", [gpu_us, is_kernel], thread)
    (ann_syncs,) = sums_inside(ann, points, "ts", [None], thread)
    step_gpu, step_kernels = sums_inside(steps, launches, "launch_ts", [gpu_us, is_kernel], ("rank",))

    parts = []
    if len(ann):
        keys, inverse = _keys(ann["rank"].to_numpy(), name_codes_all[at])
        names = ev["name"].cat.categories[keys[:, 1]].astype(str)
        a = pd.DataFrame({"rank": keys[:, 0], "name": np.asarray(names, dtype=object),
                          "kind": "annotation", "iteration": -1, "count": np.bincount(inverse),
                          **exact_sums(inverse, len(keys), cpu_us=ann["dur"].to_numpy(), gpu_us=ann_gpu,
                                       gpu_kernels=ann_kernels, syncs=ann_syncs)})
        parts.append(a)
    if not steps.empty:
        keys, inverse = _keys(steps["rank"].to_numpy(), steps["step"].to_numpy())
        syncs = _counts_at(keys, points["rank"].to_numpy(np.int64), points["iteration"].to_numpy(np.int64))
        label = "ProfilerStep#{}" if find_iterations(trace).how == "marked" else "iteration#{}"
        s = pd.DataFrame({"rank": keys[:, 0],
                          "name": np.array([label.format(i) for i in keys[:, 1]], dtype=object),
                          "kind": "iteration", "iteration": keys[:, 1], "count": np.bincount(inverse),
                          **exact_sums(inverse, len(keys), cpu_us=steps["dur"].to_numpy(),
                                       gpu_us=step_gpu, gpu_kernels=step_kernels),
                          "syncs": np.asarray(syncs, dtype=np.int64)})
        parts.append(s)
    if not parts:
        return _empty(RANK_COLUMNS)
    out = pd.concat(parts, ignore_index=True)[RANK_COLUMNS]
    return out.astype({c: _TYPES[c] for c in RANK_COLUMNS if _TYPES[c] is not object})


def _counts_at(keys: np.ndarray, rank: np.ndarray, iteration: np.ndarray) -> np.ndarray:
    """How many of the (rank, iteration) pairs equal each row of `keys`: one sort for all ranks
    (a lookup per (rank, step) cost ~50 us: 2 s over 20,000 ranks)."""
    codes = tuple_codes(np.r_[keys[:, 0], rank], np.r_[keys[:, 1], iteration])
    counts = np.bincount(codes[len(keys):], minlength=int(codes.max(initial=-1)) + 1)
    return counts[codes[:len(keys)]].astype(np.int64)


def _keys(rank: np.ndarray, code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (rank, code) pairs (rows of a 2-column array, sorted) and each input's pair."""
    pairs = np.stack([np.asarray(rank, dtype=np.int64), np.asarray(code, dtype=np.int64)], axis=1)
    keys, inverse = np.unique(pairs, axis=0, return_inverse=True)
    return keys, inverse.reshape(-1)


def over_ranks(by_rank: pd.DataFrame) -> pd.DataFrame:
    """One row per phase: the median rank's row, with ranks, median_rank, cpu_max_us, max_rank
    (module docstring). Annotations by cpu_us, largest first, then the iterations in step order."""
    if by_rank.empty:
        return _empty(COLUMNS)
    # Within a phase: ranks by CPU time (ties: lower rank first), so the median is a position.
    t = by_rank.sort_values(["kind", "name", "cpu_us", "rank"], kind="stable").reset_index(drop=True)
    key = t["kind"].astype(str) + "\0" + t["name"].astype(str)
    start = np.flatnonzero(np.r_[True, key.to_numpy()[1:] != key.to_numpy()[:-1]])
    size = np.diff(np.r_[start, len(t)])
    median = start + (size - 1) // 2
    cpu = t["cpu_us"].to_numpy()
    rank = t["rank"].to_numpy()
    # the slowest rank: the largest cpu_us; among equals the lowest rank
    last = start + size - 1
    top = np.array([s + int(np.flatnonzero(cpu[s:e + 1] == cpu[e])[0]) for s, e in zip(start, last)],
                   dtype=np.int64)
    out = t.iloc[median].drop(columns="rank").assign(
        ranks=size, median_rank=rank[median], cpu_max_us=cpu[last], max_rank=rank[top])
    ann = out[out["kind"] == "annotation"].sort_values(["cpu_us", "name"], ascending=[False, True],
                                                       kind="stable")
    its = out[out["kind"] == "iteration"].sort_values("iteration", kind="stable")
    out = pd.concat([ann, its], ignore_index=True)[COLUMNS]
    return out.astype({c: _TYPES[c] for c in COLUMNS if _TYPES[c] is not object})


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=_TYPES[c]) for c in columns})


def phases_json(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The `phases` list of the analysis JSON (or `phases_by_rank` with a `rank` column), plain
    Python types."""
    cols = [c for c in (["rank"] + COLUMNS) if c in df.columns]
    conv = {c: (str if _TYPES[c] is object else float if _TYPES[c] is float else int) for c in cols}
    return [{c: conv[c](v) for c, v in zip(cols, row)}
            for row in zip(*(df[c].tolist() for c in cols))]
