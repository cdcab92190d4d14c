"""Per-device GPU time: span, busy (union of activity), idle, utilization and kernel time.

Definitions are DESIGN.md's: GPU activity is kernels, memcpys and memsets; span runs from the first
activity start to the last activity end; busy is the length of the union of activity intervals, so
work overlapping on several streams counts once; kernel time is the plain sum of kernel durations,
so concurrent streams each count (kernel_us can exceed busy_us).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..trace.model import Trace
from .intervals import merge_intervals, thread_groups

COLUMNS = ["rank", "device", "span_us", "busy_us", "idle_us", "utilization", "kernel_us",
           "activity_count", "first_ts", "last_end"]


@dataclass
class DeviceActivity:
    """The GPU activity of one (rank, device): its rows (positions in trace.gpu), their start,
    end and whether each is a kernel, and the union of their intervals as disjoint blocks."""

    rank: int
    device: int
    rows: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    is_kernel: np.ndarray
    blocks: tuple[np.ndarray, np.ndarray]


def device_activity(trace: Trace) -> list[DeviceActivity]:
    """One entry per (rank, device) with GPU activity, in (rank, device) order; built once per
    trace (gpu_time and burstiness both need the busy blocks)."""
    cached = trace.cache.get("device_activity")
    if cached is None:
        gpu = trace.gpu
        ts, end = gpu["ts"].to_numpy(float), gpu["end"].to_numpy(float)
        kernel = (gpu["cat"] == "kernel").to_numpy()
        cached = trace.cache["device_activity"] = [
            DeviceActivity(rank, device, rows, ts[rows], end[rows], kernel[rows],
                           merge_intervals(ts[rows], end[rows]))
            for (rank, device), rows in thread_groups(gpu, ("rank", "device")).items()]
    return cached


def gpu_time(trace: Trace) -> pd.DataFrame:
    """One row per (rank, device) that ran GPU activity; columns as in `COLUMNS`."""
    rows = []
    dur = trace.gpu["dur"].to_numpy()
    for d in device_activity(trace):
        block_starts, block_ends = d.blocks
        first, last = float(d.starts.min()), float(d.ends.max())
        span = last - first
        busy = float((block_ends - block_starts).sum())
        rows.append({
            "rank": d.rank, "device": d.device, "span_us": span, "busy_us": busy,
            "idle_us": span - busy,
            # A device whose only activity has zero length has no span to be busy in.
            "utilization": busy / span if span > 0 else 0.0,
            "kernel_us": float(dur[d.rows][d.is_kernel].sum()),
            "activity_count": len(d.rows), "first_ts": first, "last_end": last,
        })
    out = pd.DataFrame(rows, columns=COLUMNS)
    return out.astype({"rank": np.int64, "device": np.int64, "activity_count": np.int64})
