"""Per-device GPU time: span, busy (union of activity), idle, utilization and kernel time.

Definitions are DESIGN.md's: GPU activity is kernels, memcpys and memsets; span runs from the first
activity start to the last activity end; busy is the length of the union of activity intervals, so
work overlapping on several streams counts once; kernel time is the plain sum of kernel durations,
so concurrent streams each count (kernel_us can exceed busy_us).

Within the steps (`step_*`, NaN on a rank without iterations): the same inside the steps' bounds
(analysis/iterations.py `step_windows`: each step from its host start to its end, or to its last
GPU activity when later), so host work before a step's first kernel counts as idle:
`step_span_us` (the windows' length), `step_busy_us` (busy time inside them), `step_idle_us`,
`step_utilization`. The first-to-last figures stay (HTA and TraceLens measure those).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...trace.model import Trace, in_categories
from ..intervals import per_segment, segment_covered_before, segment_merge
from ..memo import derived

COLUMNS = ["rank", "device", "span_us", "busy_us", "idle_us", "utilization", "kernel_us",
           "activity_count", "first_ts", "last_end", "step_span_us", "step_busy_us", "step_idle_us",
           "step_utilization"]


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
    """The trace's DeviceTable, built once per trace (memo.py)."""
    return derived(trace, "device_table", _device_table)


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
    return derived(trace, "device_activity", _device_activity)


def _device_activity(trace: Trace) -> list[DeviceActivity]:
    t = device_table(trace)
    b, bb = t.bounds.tolist(), t.block_bounds.tolist()
    return [DeviceActivity(r, d, t.rows[b[i]:b[i + 1]], t.starts[b[i]:b[i + 1]], t.ends[b[i]:b[i + 1]],
                           t.is_kernel[b[i]:b[i + 1]],
                           (t.block_starts[bb[i]:bb[i + 1]], t.block_ends[bb[i]:bb[i + 1]]))
            for i, (r, d) in enumerate(zip(t.rank.tolist(), t.device.tolist()))]


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
        "kernel_us": kernel_us, "activity_count": np.diff(t.bounds), "first_ts": first, "last_end": last,
        **_in_steps(trace, t)}, columns=COLUMNS)
    return out.astype({"rank": np.int64, "device": np.int64, "activity_count": np.int64})


def _in_steps(trace: Trace, t: DeviceTable) -> dict[str, np.ndarray]:
    """step_span_us, step_busy_us, step_idle_us, step_utilization of every device (module
    docstring): each device's busy blocks measured inside its rank's step windows, all devices
    at once (covered-before sums at each window's ends)."""
    from ..iterations import step_windows
    n = len(t)
    dev, ws, we = step_windows(trace).of_each(t.rank)
    has = np.bincount(dev, minlength=n) > 0
    busy = (segment_covered_before(t.block_starts, t.block_ends, t.block_bounds, dev, we)
            - segment_covered_before(t.block_starts, t.block_ends, t.block_bounds, dev, ws))
    span = np.bincount(dev, weights=we - ws, minlength=n)
    busy = np.bincount(dev, weights=busy, minlength=n)
    span, busy = np.where(has, span, np.nan), np.where(has, busy, np.nan)
    util = np.where(span > 0, busy / np.where(span > 0, span, 1.0), np.where(has, 0.0, np.nan))
    return {"step_span_us": span, "step_busy_us": busy, "step_idle_us": span - busy, "step_utilization": util}


# Runtime/driver calls that launch device work (cudaLaunchKernel, cudaLaunchKernelExC,
# cuLaunchKernel, hipLaunchKernel, hipModuleLaunchKernel, hipExtLaunchKernel, cudaGraphLaunch...).
_LAUNCH_CALL = re.compile(r"^(cuda|cu|hip)\w*Launch", re.I)


@dataclass(frozen=True)
class Unrecorded:
    """A trace with no GPU activity that is not a CPU-only run: the host launched device work
    (`launches`: runtime launch calls), or allocated GPU memory (`gpu_memory`), or the trace lists
    GPUs in deviceProperties (`listed`, with their names), yet no kernel, memcpy or memset was
    recorded. `ranks`: the ranks that launched or allocated on a GPU."""

    launches: int
    gpu_memory: bool
    listed: int
    names: tuple[str, ...]
    ranks: frozenset

    def text(self) -> str:
        """What the reports say instead of "a CPU-only run"."""
        gpus = (f"the trace lists {self.listed} GPU(s)"
                + (f" ({', '.join(self.names)})" if self.names else "") + " in deviceProperties")
        if self.launches or self.gpu_memory:
            did = (f"the host made {self.launches:,} kernel launch call(s)" if self.launches
                   else "the host allocated GPU memory")
            return (f"GPU activity was not recorded: {did}"
                    + (f" and {gpus}" if self.listed else "")
                    + ", but the trace has no kernel events. Not a CPU-only run: the profiler's "
                    "CUDA activity (CUPTI) was off; record with "
                    "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] to see the kernels")
        return (f"GPU activity was not recorded: {gpus} but has no kernel events and no launch "
                "calls (either the run left the GPUs unused, or the profiler's CUDA activity was "
                "off: record with ProfilerActivity.CUDA)")


def unrecorded_gpu(trace: Trace) -> Unrecorded | None:
    """Unrecorded when the trace has no GPU activity but launch calls, GPU memory events or
    listed GPUs; None when it has GPU activity or none of these (a CPU-only run). Cached."""
    return derived(trace, "unrecorded_gpu", _unrecorded_gpu) or None


def _unrecorded_gpu(trace: Trace) -> Unrecorded | bool:
    if not trace.gpu.empty:
        return False
    from ..host.links import LAUNCH_CATS
    ev = trace.events
    names = ev["name"].cat.categories
    launch_codes = np.flatnonzero([bool(_LAUNCH_CALL.match(str(n))) for n in names])
    is_launch = (np.isin(ev["name"].cat.codes.to_numpy(), launch_codes)
                 & in_categories(ev["cat"], LAUNCH_CATS)) if len(launch_codes) else np.zeros(len(ev), bool)
    mem = trace.memory
    on_gpu = (mem["device_type"].to_numpy() > 0) if len(mem) else np.zeros(0, bool)
    ranks = set(pd.unique(ev["rank"].to_numpy()[is_launch]).tolist())
    ranks |= set(pd.unique(mem["rank"].to_numpy()[on_gpu]).tolist()) if on_gpu.any() else set()
    props = trace.device_properties or {}
    listed = max((len(v or []) for v in props.values()), default=0)
    if not ranks and not listed:
        return False
    names_listed = sorted({p["name"].strip() for v in props.values() for p in (v or [])
                           if isinstance(p, dict) and isinstance(p.get("name"), str) and p["name"].strip()})
    return Unrecorded(int(is_launch.sum()), bool(on_gpu.any()), int(listed), tuple(names_listed),
                      frozenset(int(r) for r in ranks))
