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

import numpy as np
import pandas as pd

from ...trace.model import Trace, name_codes
from ..intervals import exact_sums, tuple_codes
from ..iterations import find_iterations, step_table
from .links import gpu_launches
from ..tree import STEP, sums_inside

RANK_COLUMNS = ["rank", "name", "kind", "iteration", "count", "cpu_us", "gpu_us", "gpu_kernels",
                "syncs"]
COLUMNS = ["name", "kind", "iteration", "count", "cpu_us", "gpu_us", "gpu_kernels", "syncs",
           "ranks", "median_rank", "cpu_max_us", "max_rank"]
COLUMN_TYPES = {"rank": np.int64, "name": object, "kind": object, "iteration": np.int64,
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
    links = gpu_launches(trace)
    known = np.flatnonzero(links["launch_row"].to_numpy() >= 0)
    # the columns read, by position (a selection of the whole table costs a millisecond)
    launches = pd.DataFrame({c: links[c].to_numpy()[known] for c in ("rank", "pid", "tid", "launch_ts")})
    gpu_us = links["dur"].to_numpy()[known]
    cat = ev["cat"]
    kernel = cat.cat.categories.get_indexer(["kernel"])[0]
    is_kernel = ((cat.cat.codes.to_numpy()[ev.index.get_indexer(links["gpu_row"].to_numpy()[known])] == kernel)
                 & (kernel >= 0)).astype(float)

    thread = ("rank", "pid", "tid")
    ann_gpu, ann_kernels = sums_inside(ann, launches, "launch_ts", [gpu_us, is_kernel], thread)
    (ann_syncs,) = sums_inside(ann, points, "ts", [None], thread)
    step_gpu, step_kernels = sums_inside(steps, launches, "launch_ts", [gpu_us, is_kernel], ("rank",))

    parts = []  # each part's columns as arrays, joined once
    if len(ann):
        keys, inverse = _keys(ann["rank"].to_numpy(), name_codes_all[at])
        names = ev["name"].cat.categories[keys[:, 1]].astype(str)
        n = len(keys)
        parts.append({"rank": keys[:, 0], "name": np.asarray(names, dtype=object),
                      "kind": np.full(n, "annotation", dtype=object), "iteration": np.full(n, -1),
                      "count": np.bincount(inverse),
                      **exact_sums(inverse, n, cpu_us=ann["dur"].to_numpy(), gpu_us=ann_gpu,
                                   gpu_kernels=ann_kernels, syncs=ann_syncs)})
    if not steps.empty:
        keys, inverse = _keys(steps["rank"].to_numpy(), steps["step"].to_numpy())
        syncs = _counts_at(keys, points["rank"].to_numpy(np.int64), points["iteration"].to_numpy(np.int64))
        label = "ProfilerStep#{}" if find_iterations(trace).how == "marked" else "iteration#{}"
        n = len(keys)
        parts.append({"rank": keys[:, 0], "name": np.array([label.format(i) for i in keys[:, 1]], dtype=object),
                      "kind": np.full(n, "iteration", dtype=object), "iteration": keys[:, 1],
                      "count": np.bincount(inverse),
                      **exact_sums(inverse, n, cpu_us=steps["dur"].to_numpy(),
                                   gpu_us=step_gpu, gpu_kernels=step_kernels),
                      "syncs": np.asarray(syncs, dtype=np.int64)})
    if not parts:
        return _empty(RANK_COLUMNS)
    return _frame({c: np.concatenate([p[c].astype(COLUMN_TYPES[c]) for p in parts]) for c in RANK_COLUMNS})


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
    (module docstring). Annotations by cpu_us, largest first, then the iterations in step order.
    On numpy arrays (a handful of rows: pandas sorts and selections cost milliseconds)."""
    if by_rank.empty:
        return _empty(COLUMNS)
    col = {c: by_rank[c].to_numpy() for c in RANK_COLUMNS}
    kind, name = (_text_order(by_rank[c]) for c in ("kind", "name"))
    cpu, rank = col["cpu_us"].astype(float), col["rank"]
    # Within a phase: ranks by CPU time (ties: lower rank first), so the median is a position.
    t = np.lexsort((rank, cpu, name, kind))  # stable: rows of equal keys keep their order
    kind, name, cpu, rank = kind[t], name[t], cpu[t], rank[t]
    start = np.flatnonzero(np.r_[True, (kind[1:] != kind[:-1]) | (name[1:] != name[:-1])])
    size = np.diff(np.r_[start, len(t)])
    median = start + (size - 1) // 2
    # the slowest rank: the largest cpu_us; among equals the lowest rank
    last = start + size - 1
    top = np.array([s + int(np.flatnonzero(cpu[s:e + 1] == cpu[e])[0]) for s, e in zip(start, last)],
                   dtype=np.int64)
    row = t[median]  # each phase's median row, as a row of by_rank
    is_ann = col["kind"][row] == "annotation"
    ann = np.flatnonzero(is_ann)
    ann = ann[np.lexsort((name[median][ann], -cpu[median][ann]))]
    its = np.flatnonzero(col["kind"][row] == "iteration")
    its = its[np.argsort(col["iteration"][row][its], kind="stable")]
    pick = np.r_[ann, its]
    extra = {"ranks": size, "median_rank": rank[median], "cpu_max_us": cpu[last], "max_rank": rank[top]}
    return _frame({c: (col[c][row[pick]] if c in col else extra[c][pick]) for c in COLUMNS})


def _frame(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """A table of these columns, each of its COLUMN_TYPES dtype (texts: inferred, as pandas does)."""
    return pd.DataFrame({c: v if COLUMN_TYPES[c] is object else np.asarray(v, dtype=COLUMN_TYPES[c])
                         for c, v in columns.items()})


def _text_order(values: pd.Series) -> np.ndarray:
    """Each text's position among the distinct texts in sorted order (sorts as the texts do)."""
    _, inverse = np.unique(values.to_numpy(dtype=object), return_inverse=True)
    return inverse.ravel()


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=COLUMN_TYPES[c]) for c in columns})
