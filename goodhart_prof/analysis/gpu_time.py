"""Per-device GPU time: span, busy (union of activity), idle, utilization and kernel time.

Definitions are DESIGN.md's: GPU activity is kernels, memcpys and memsets; span runs from the first
activity start to the last activity end; busy is the length of the union of activity intervals, so
work overlapping on several streams counts once; kernel time is the plain sum of kernel durations,
so concurrent streams each count (kernel_us can exceed busy_us).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.model import Trace
from .intervals import merge_intervals

COLUMNS = ["rank", "device", "span_us", "busy_us", "idle_us", "utilization", "kernel_us",
           "activity_count", "first_ts", "last_end"]


def device_groups(gpu: pd.DataFrame):
    """(rank, device) -> GPU-activity rows, in (rank, device) order."""
    if gpu.empty:
        return
    yield from gpu.groupby(["rank", "device"], sort=True, observed=True)


def gpu_time(trace: Trace) -> pd.DataFrame:
    """One row per (rank, device) that ran GPU activity; columns as in `COLUMNS`."""
    rows = []
    for (rank, device), g in device_groups(trace.gpu):
        starts, ends = g["ts"].to_numpy(), g["end"].to_numpy()
        block_starts, block_ends = merge_intervals(starts, ends)
        first, last = float(starts.min()), float(ends.max())
        span = last - first
        busy = float((block_ends - block_starts).sum())
        rows.append({
            "rank": int(rank), "device": int(device), "span_us": span, "busy_us": busy,
            "idle_us": span - busy,
            # A device whose only activity has zero length has no span to be busy in.
            "utilization": busy / span if span > 0 else 0.0,
            "kernel_us": float(g["dur"].to_numpy()[(g["cat"] == "kernel").to_numpy()].sum()),
            "activity_count": len(g), "first_ts": first, "last_end": last,
        })
    out = pd.DataFrame(rows, columns=COLUMNS)
    return out.astype({"rank": np.int64, "device": np.int64, "activity_count": np.int64})
