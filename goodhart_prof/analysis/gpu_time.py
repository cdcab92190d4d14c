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
from .intervals import per_segment, segment_merge

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


@dataclass
class DeviceTable:
    """The GPU activity of every (rank, device), device after device in (rank, device) order:
    device i's activities are [bounds[i], bounds[i+1]) of rows (positions in trace.gpu,
    ascending), starts, ends and is_kernel; its busy blocks [block_bounds[i], block_bounds[i+1])
    of block_starts and block_ends. Built for all devices at once (a device at a time cost
    ~50 us each: a second over 20,000 ranks)."""

    rank: np.ndarray
    device: np.ndarray
    bounds: np.ndarray
    rows: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    is_kernel: np.ndarray
    block_bounds: np.ndarray
    block_starts: np.ndarray
    block_ends: np.ndarray

    def __len__(self) -> int:
        return len(self.rank)


def device_table(trace: Trace) -> DeviceTable:
    """The trace's DeviceTable, built once and cached on it."""
    return trace.derived("device_table", _device_table)


def _device_table(trace: Trace) -> DeviceTable:
    gpu = trace.gpu
    rank, device = gpu["rank"].to_numpy(np.int64), gpu["device"].to_numpy(np.int64)
    rows = np.lexsort((device, rank))  # stable: rows ascend within a device
    new = np.r_[True, (rank[rows][1:] != rank[rows][:-1]) | (device[rows][1:] != device[rows][:-1])] \
        if len(rows) else np.zeros(0, dtype=bool)
    first = np.flatnonzero(new)
    bounds = np.r_[first, len(rows)].astype(np.int64)
    ts, end = gpu["ts"].to_numpy(float)[rows], gpu["end"].to_numpy(float)[rows]
    block_starts, block_ends, block_bounds = segment_merge(ts, end, bounds)
    return DeviceTable(rank[rows][first], device[rows][first], bounds, rows, ts, end,
                       (gpu["cat"] == "kernel").to_numpy()[rows], block_bounds, block_starts, block_ends)


def device_activity(trace: Trace) -> list[DeviceActivity]:
    """One entry per (rank, device) with GPU activity, in (rank, device) order: views of the
    DeviceTable, built once per trace."""
    cached = trace.cache.get("device_activity")
    if cached is None:
        t = device_table(trace)
        b, bb = t.bounds.tolist(), t.block_bounds.tolist()
        cached = trace.cache["device_activity"] = [
            DeviceActivity(r, d, t.rows[b[i]:b[i + 1]], t.starts[b[i]:b[i + 1]], t.ends[b[i]:b[i + 1]],
                           t.is_kernel[b[i]:b[i + 1]],
                           (t.block_starts[bb[i]:bb[i + 1]], t.block_ends[bb[i]:bb[i + 1]]))
            for i, (r, d) in enumerate(zip(t.rank.tolist(), t.device.tolist()))]
    return cached


def gpu_time(trace: Trace) -> pd.DataFrame:
    """One row per (rank, device) that ran GPU activity; columns as in `COLUMNS`."""
    t = device_table(trace)
    if not len(t):
        return pd.DataFrame(columns=COLUMNS).astype({"rank": np.int64, "device": np.int64,
                                                      "activity_count": np.int64})
    first = np.minimum.reduceat(t.starts, t.bounds[:-1])
    last = np.maximum.reduceat(t.ends, t.bounds[:-1])
    span = last - first
    # sums per device as np.sum of its own array rounds them (per_segment)
    busy = per_segment(t.block_ends - t.block_starts, t.block_bounds, lambda m: m.sum(axis=1))
    dur = trace.gpu["dur"].to_numpy(float)[t.rows]
    kernel_dur = dur[t.is_kernel]
    kernel_bounds = np.r_[0, np.cumsum(t.is_kernel)][t.bounds]
    kernel_us = per_segment(kernel_dur, kernel_bounds, lambda m: m.sum(axis=1))
    kernel_us[np.diff(kernel_bounds) == 0] = 0.0  # no kernels (memcpys only)
    out = pd.DataFrame({
        "rank": t.rank, "device": t.device, "span_us": span, "busy_us": busy, "idle_us": span - busy,
        # A device whose only activity has zero length has no span to be busy in.
        "utilization": np.where(span > 0, busy / np.where(span > 0, span, 1.0), 0.0),
        "kernel_us": kernel_us, "activity_count": np.diff(t.bounds), "first_ts": first, "last_end": last},
        columns=COLUMNS)
    return out.astype({"rank": np.int64, "device": np.int64, "activity_count": np.int64})
