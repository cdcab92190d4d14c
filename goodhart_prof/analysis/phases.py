"""Phases: per annotation name and per traced iteration, CPU time, GPU time launched, sync points.

Rows (docs/DESIGN.md "phases"):

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

from ..trace.model import Trace, name_codes
from .intervals import exact_sums
from .links import gpu_launches
from .tree import STEP, step_table, sums_inside

COLUMNS = ["name", "kind", "iteration", "count", "cpu_us", "gpu_us", "gpu_kernels", "syncs"]


def phases(trace: Trace, points: pd.DataFrame) -> pd.DataFrame:
    """The phase table (see the module docstring); `points` is `sync_points(trace)`."""
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
        codes, inverse = np.unique(name_codes_all[at], return_inverse=True)
        names = ev["name"].cat.categories[codes].astype(str)
        cpu_us = ann["dur"].to_numpy()
        a = pd.DataFrame({"name": np.asarray(names, dtype=object), "kind": "annotation",
                          "iteration": -1, "count": np.bincount(inverse),
                          **exact_sums(inverse, len(codes), cpu_us=cpu_us, gpu_us=ann_gpu,
                                     gpu_kernels=ann_kernels, syncs=ann_syncs)})
        parts.append(a.sort_values(["cpu_us", "name"], ascending=[False, True], kind="stable"))
    if not steps.empty:
        its, inverse = np.unique(steps["step"].to_numpy(), return_inverse=True)
        per_it = points["iteration"].value_counts() if len(points) else pd.Series(dtype=np.int64)
        s = pd.DataFrame({"name": np.array([f"ProfilerStep#{i}" for i in its], dtype=object),
                          "kind": "iteration", "iteration": its, "count": np.bincount(inverse),
                          **exact_sums(inverse, len(its), cpu_us=steps["dur"].to_numpy(),
                                     gpu_us=step_gpu, gpu_kernels=step_kernels),
                          "syncs": pd.Series(its).map(per_it).fillna(0).to_numpy()})
        parts.append(s)
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
            COLUMNS, (object, object, np.int64, np.int64, float, float, np.int64, np.int64))})
    out = pd.concat(parts, ignore_index=True)[COLUMNS]
    return out.astype({"iteration": np.int64, "count": np.int64, "cpu_us": float, "gpu_us": float,
                       "gpu_kernels": np.int64, "syncs": np.int64})


def phases_json(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The `phases` list of the analysis JSON, plain Python types."""
    return [{"name": str(n), "kind": str(k), "iteration": int(i), "count": int(c),
             "cpu_us": float(cpu), "gpu_us": float(gpu), "gpu_kernels": int(nk), "syncs": int(s)}
            for n, k, i, c, cpu, gpu, nk, s in zip(*(df[c].tolist() for c in COLUMNS))]
