"""How evenly each device is kept busy: windowed utilization, idle gaps and kernel-start burstiness.

Definitions are DESIGN.md's (per device):
- the span (first activity start to last activity end) is cut into windows of `window_us`
  (span / `windows`, at least `min_window_us`); a window's utilization is the busy time (union of
  GPU activity) inside it over its length, and `util_cv` is the coefficient of variation
  (population std / mean) of those utilizations. The last window stops at the span's end, so
  time after the last activity never counts as idle.
- gaps are the idle stretches between consecutive merged busy blocks. A gap is `host_wait` when
  the launch call of the activity that ends it began after the gap began (the CPU had not yet
  asked for the work when the GPU ran out of it), else `launch` when shorter than 30 us, else
  `other` (the work was queued but waited on something else: an event, another stream, a sync).
  When several activities start the block, the earliest launch counts; an activity whose launch
  is not in the trace cannot show host wait.
- `idle_causes`: what the host thread that launched each gap's opening work was doing during the
  gap, summed per cause (analysis/idle.py has the definition).
- `burstiness_B` = (sigma - mu) / (sigma + mu) of the intervals between consecutive kernel starts
  (kernels only, all streams of the device together): -1 for a metronome, about 0 for Poisson
  arrivals, towards 1 for bursts. None with fewer than 3 kernels or when every kernel starts at
  the same instant.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from ..trace.model import Trace
from . import idle
from .gpu_time import DeviceActivity, device_activity
from .intervals import covered_before
from .links import gpu_launches

LAUNCH_GAP_US = 30.0
GAP_CLASSES = ("host_wait", "launch", "other")


@dataclass
class DeviceBurstiness:
    rank: int
    device: int
    window_us: float
    window_starts: np.ndarray
    window_util: np.ndarray
    util_cv: float | None
    burstiness_B: float | None
    gaps: dict
    gap_start: np.ndarray = field(repr=False)  # the gaps as arrays; gap_table is built from them
    gap_end: np.ndarray = field(repr=False)
    gap_cls: np.ndarray = field(repr=False)  # codes into GAP_CLASSES
    idle_causes: list = field(default_factory=list)  # idle.py: [{cause, idle_us, share, frame}]

    @property
    def gap_dur(self) -> np.ndarray:
        return self.gap_end - self.gap_start

    @cached_property
    def gap_table(self) -> pd.DataFrame:
        """The gaps: start, end, dur_us and cls (a categorical of GAP_CLASSES). Built on first
        use: a DataFrame per device cost ~3 ms, a minute over 20,000 ranks that no report reads."""
        return pd.DataFrame({"start": self.gap_start, "end": self.gap_end, "dur_us": self.gap_dur,
                             "cls": pd.Categorical.from_codes(self.gap_cls, categories=list(GAP_CLASSES))})

    def to_json(self) -> dict:
        """DESIGN.md's per-device `burstiness` object: plain floats and ints, None for undefined."""
        return {"window_us": _num(self.window_us), "util_cv": _num(self.util_cv),
                "burstiness_B": _num(self.burstiness_B), "gaps": _plain(self.gaps),
                "idle_causes": [{"cause": c["cause"], "idle_us": _num(c["idle_us"]),
                                 "share": _num(c["share"]), "frame": c["frame"]}
                                for c in self.idle_causes]}


def burstiness(trace: Trace, windows: int = 200,
               min_window_us: float = 10.0) -> list[DeviceBurstiness]:
    """One `DeviceBurstiness` per (rank, device) that ran GPU activity, in (rank, device) order."""
    if windows < 1:
        raise ValueError(f"windows must be at least 1, not {windows}")
    gpu = trace.gpu
    if gpu.empty:
        return []
    # Launch start per GPU activity, aligned with trace.gpu's rows (NaN: launch not in the trace).
    links = gpu_launches(trace)  # one row per trace.gpu row, in the same order
    launch_ts = np.where(links["launch_row"].to_numpy() >= 0, links["launch_ts"].to_numpy(float), np.nan)
    pid, tid = links["pid"].to_numpy(np.int64), links["tid"].to_numpy(np.int64)
    return [_device(trace, d, launch_ts[d.rows], pid[d.rows], tid[d.rows], windows, min_window_us)
            for d in device_activity(trace)]


def _device(trace: Trace, d: DeviceActivity, launch_ts: np.ndarray, pid: np.ndarray,
            tid: np.ndarray, windows: int, min_window_us: float) -> DeviceBurstiness:
    starts, ends, blocks = d.starts, d.ends, d.blocks
    first, last = float(starts.min()), float(ends.max())
    window_us, window_starts, window_util = _timeline(blocks, first, last, windows, min_window_us)
    gap_start, gap_end, gap_cls, opener = _gaps(blocks, starts, launch_ts)
    # The thread each gap is read from: the one that launched the gap's opening work (idle.py).
    known = opener >= 0
    g_pid, g_tid = idle.gap_threads(d.rank, np.where(known, pid[np.maximum(opener, 0)], -1),
                                    np.where(known, tid[np.maximum(opener, 0)], -1), pid, tid, trace)
    causes = idle.idle_causes(trace, d.rank, gap_start, gap_end, g_pid, g_tid)
    return DeviceBurstiness(d.rank, d.device, window_us, window_starts, window_util,
                            _cv(window_util), _burstiness_b(starts[d.is_kernel]),
                            _gap_summary(gap_end - gap_start, gap_cls), gap_start, gap_end, gap_cls,
                            causes)


def _timeline(blocks, first: float, last: float, windows: int, min_window_us: float):
    span = last - first
    window_us = max(span / windows, min_window_us)
    if span <= 0:
        return window_us, np.empty(0), np.empty(0)
    # Rounding can leave span / window_us a hair above an integer; that is not another window.
    n = max(1, math.ceil(span / window_us - 1e-9))
    # Window edges are laid out relative to the first activity: absolute trace clocks reach 1e15 us,
    # where a float64 step is 0.25 us and edges like first + k * window_us would not meet exactly.
    block_starts, block_ends = blocks[0] - first, blocks[1] - first
    rel_starts = window_us * np.arange(n)
    rel_ends = np.minimum(rel_starts + window_us, span)
    rel_ends[-1] = span
    busy = (covered_before(block_starts, block_ends, rel_ends)
            - covered_before(block_starts, block_ends, rel_starts))
    return window_us, first + rel_starts, busy / (rel_ends - rel_starts)


def _gaps(blocks, starts: np.ndarray, launch_ts: np.ndarray):
    """Gap starts, ends, class codes and the opening activity of each (-1: no launch known)."""
    block_starts, block_ends = blocks
    gap_start, gap_end = block_ends[:-1], block_starts[1:]
    # The launch that matters for a gap is the earliest one among the activities starting exactly
    # when the next block starts (an unknown launch counts as never: it cannot show host wait).
    order = np.argsort(starts, kind="stable")
    sorted_starts = starts[order]
    sorted_launch = np.where(np.isnan(launch_ts[order]), np.inf, launch_ts[order])
    new_start = np.flatnonzero(np.r_[True, sorted_starts[1:] != sorted_starts[:-1]])
    earliest_launch = np.minimum.reduceat(sorted_launch, new_start)
    group = np.searchsorted(sorted_starts[new_start], gap_end)  # gap_end is some activity's start
    opener_launch = earliest_launch[group]
    # The opening activity: the one with that earliest launch (-1 when no launch is known).
    first_of = np.full(len(new_start), len(order), dtype=np.int64)
    is_min = sorted_launch == np.repeat(earliest_launch, np.diff(np.r_[new_start, len(order)]))
    pos = np.flatnonzero(is_min & np.isfinite(sorted_launch))
    np.minimum.at(first_of, np.searchsorted(new_start, pos, side="right") - 1, pos)
    opener = np.where(first_of[group] < len(order), order[np.minimum(first_of[group], len(order) - 1)], -1)
    dur = gap_end - gap_start
    host_wait = np.isfinite(opener_launch) & (opener_launch > gap_start)
    cls = np.where(host_wait, _CLASS_CODE["host_wait"],
                   np.where(dur < LAUNCH_GAP_US, _CLASS_CODE["launch"], _CLASS_CODE["other"]))
    return gap_start, gap_end, cls.astype(np.int8), opener


_CLASS_CODE = {c: i for i, c in enumerate(GAP_CLASSES)}


def _gap_summary(dur: np.ndarray, codes: np.ndarray) -> dict:
    if len(dur):
        p50, p90, p99 = np.percentile(dur, [50, 90, 99])
        stats = {"p50_us": float(p50), "p90_us": float(p90), "p99_us": float(p99),
                 "max_us": float(dur.max())}
    else:
        stats = {"p50_us": None, "p90_us": None, "p99_us": None, "max_us": None}
    counts = np.bincount(codes, minlength=len(GAP_CLASSES))
    by_class = {c: {"count": int(counts[i]), "total_us": math.fsum(dur[codes == i])}
                for i, c in enumerate(GAP_CLASSES)}
    return {"count": int(len(dur)), **stats, "total_us": float(dur.sum()), "by_class": by_class}


def _cv(values: np.ndarray) -> float | None:
    if len(values) == 0:
        return None
    mean = float(values.mean())
    return float(values.std()) / mean if mean > 0 else None


def _burstiness_b(kernel_starts: np.ndarray) -> float | None:
    if len(kernel_starts) < 3:
        return None
    intervals = np.diff(np.sort(kernel_starts))
    mu, sigma = float(intervals.mean()), float(intervals.std())
    return (sigma - mu) / (sigma + mu) if sigma + mu > 0 else None


def _num(x):
    """A JSON-safe number: numpy scalars become Python ones, NaN and inf become None."""
    if x is None:
        return None
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    x = float(x)
    return x if math.isfinite(x) else None


def _plain(obj):
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return _num(obj)
