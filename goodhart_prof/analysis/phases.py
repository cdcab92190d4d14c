"""Phases: per annotation name and per traced iteration, CPU time, GPU time launched, sync points.

Rows (shared/DESIGN.md "phases"):

- kind `annotation`: one row per `user_annotation` name (`record_function` labels such as
  `rollout`), over the whole trace (all ranks, all iterations), iteration -1.
- kind `iteration`: one row per `ProfilerStep#N` (summed over ranks), iteration N.

Columns: name, kind, iteration, count (annotation instances), cpu_us (sum of their durations),
gpu_us (sum of durations of GPU activity -- kernels, memcpys, memsets -- whose launch call starts
inside an instance), gpu_kernels (how many of those are kernels), syncs (sync points whose host
call starts inside an instance).

"Inside" for an annotation means on the same rank/pid/tid: `record_function` scopes are
per-thread, so work another thread does meanwhile is not the annotation's. (On CUDA the autograd
engine runs backward on its own thread, so a phase that calls `.backward()` shows the forward
launches only.) For a `ProfilerStep#N` it means anywhere on the rank: an iteration owns all the
work its rank does during it, backward thread and logging thread included.

Order: annotations by cpu_us (largest first), then the iterations in step order.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..trace.model import Trace
from .links import gpu_launches
from .syncs import STEP, profiler_steps

COLUMNS = ["name", "kind", "iteration", "count", "cpu_us", "gpu_us", "gpu_kernels", "syncs"]


def phases(trace: Trace, points: pd.DataFrame) -> pd.DataFrame:
    """The phase table (see the module docstring); `points` is `sync_points(trace)`."""
    ev = trace.events
    is_ann = (ev["cat"] == "user_annotation").to_numpy()
    ann = ev[is_ann]
    ann = ann[~ann["name"].astype(str).str.match(STEP.pattern).to_numpy()]
    steps = profiler_steps(ev)
    launches = gpu_launches(trace)
    launches = launches[launches["launch_row"].to_numpy() >= 0]
    launches = launches.assign(
        kernel=(ev["cat"].loc[launches["gpu_row"].to_numpy()] == "kernel").to_numpy(float))

    thread = ["rank", "pid", "tid"]
    ann_gpu = _sum_inside(ann, launches, "launch_ts", "dur", thread)
    ann_kernels = _sum_inside(ann, launches, "launch_ts", "kernel", thread)
    ann_syncs = _sum_inside(ann, points, "ts", None, thread)
    step_gpu = _sum_inside(steps, launches, "launch_ts", "dur", ["rank"])
    step_kernels = _sum_inside(steps, launches, "launch_ts", "kernel", ["rank"])

    rows = []
    if not ann.empty:
        a = pd.DataFrame({"name": ann["name"].astype(str).to_numpy(), "cpu_us": ann["dur"].to_numpy(),
                          "gpu_us": ann_gpu, "gpu_kernels": ann_kernels, "syncs": ann_syncs})
        g = a.groupby("name", sort=False).agg(count=("cpu_us", "size"), cpu_us=("cpu_us", "sum"),
                                              gpu_us=("gpu_us", "sum"),
                                              gpu_kernels=("gpu_kernels", "sum"),
                                              syncs=("syncs", "sum"))
        g = g.reset_index().assign(kind="annotation", iteration=-1)
        rows.append(g.sort_values(["cpu_us", "name"], ascending=[False, True], kind="stable"))
    if not steps.empty:
        s = pd.DataFrame({"iteration": steps["step"].to_numpy(), "cpu_us": steps["dur"].to_numpy(),
                          "gpu_us": step_gpu, "gpu_kernels": step_kernels})
        g = s.groupby("iteration", sort=True).agg(count=("cpu_us", "size"), cpu_us=("cpu_us", "sum"),
                                                  gpu_us=("gpu_us", "sum"),
                                                  gpu_kernels=("gpu_kernels", "sum")).reset_index()
        per_it = points["iteration"].value_counts() if len(points) else pd.Series(dtype=np.int64)
        g["syncs"] = g["iteration"].map(per_it).fillna(0).astype(np.int64)
        g["name"] = "ProfilerStep#" + g["iteration"].astype(str)
        rows.append(g.assign(kind="iteration"))
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
            COLUMNS, (object, object, np.int64, np.int64, float, float, np.int64, np.int64))})
    out = pd.concat(rows, ignore_index=True)[COLUMNS]
    return out.astype({"iteration": np.int64, "count": np.int64, "cpu_us": float, "gpu_us": float,
                       "gpu_kernels": np.int64, "syncs": np.int64})


def _sum_inside(spans: pd.DataFrame, items: pd.DataFrame, time_col: str, value_col: str | None,
                keys: list[str]) -> np.ndarray:
    """For each span, the sum of items[value_col] (or the count of items) whose time_col lies in
    [ts, end], among items with the same keys. Sorted times, prefix sums and searchsorted per
    key group: no loop over spans or items."""
    out = np.zeros(len(spans))
    if spans.empty or items.empty:
        return out
    groups = {k if isinstance(k, tuple) else (k,): g for k, g in items.groupby(keys, sort=False)}
    positions = pd.RangeIndex(len(spans))
    for key, sp in spans.reset_index(drop=True).groupby(keys, sort=False):
        g = groups.get(key if isinstance(key, tuple) else (key,))
        if g is None:
            continue
        t = g[time_col].to_numpy()
        order = np.argsort(t, kind="stable")
        t = t[order]
        values = np.ones(len(t)) if value_col is None else g[value_col].to_numpy()[order]
        cum = np.concatenate(([0.0], np.cumsum(values)))
        lo = np.searchsorted(t, sp["ts"].to_numpy(), side="left")
        hi = np.searchsorted(t, sp["end"].to_numpy(), side="right")
        out[positions.get_indexer(sp.index)] = cum[hi] - cum[lo]
    return out


def phases_json(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The `phases` list of the analysis JSON, plain Python types."""
    return [{"name": str(n), "kind": str(k), "iteration": int(i), "count": int(c),
             "cpu_us": float(cpu), "gpu_us": float(gpu), "gpu_kernels": int(nk), "syncs": int(s)}
            for n, k, i, c, cpu, gpu, nk, s in zip(*(df[c].tolist() for c in COLUMNS))]
