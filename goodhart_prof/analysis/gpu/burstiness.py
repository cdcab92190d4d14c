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
  gap, summed per cause (analysis/gpu/idle.py has the definition).
- `burstiness_B` = (sigma - mu) / (sigma + mu) of the intervals between consecutive kernel starts
  (kernels only, all streams of the device together): -1 for a metronome, about 0 for Poisson
  arrivals, towards 1 for bursts. None with fewer than 3 kernels or when every kernel starts at
  the same instant.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from ...trace.model import Trace
from . import idle
from .device_time import DeviceTable, device_table
from ..intervals import exact_sums, per_segment, segment_covered_before, segment_searchsorted
from ..host.links import gpu_launches

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
    idle_causes: list = field(default_factory=list)  # idle.py: [{cause, idle_us, share, frame[, kind, context][, compiled]}]

    @property
    def gap_dur(self) -> np.ndarray:
        return self.gap_end - self.gap_start

    @cached_property
    def gap_table(self) -> pd.DataFrame:
        """The gaps: start, end, dur_us and cls (a categorical of GAP_CLASSES). Built on first
        use: a DataFrame per device cost ~3 ms, a minute over 20,000 ranks that no report reads."""
        return pd.DataFrame({"start": self.gap_start, "end": self.gap_end, "dur_us": self.gap_dur,
                             "cls": pd.Categorical.from_codes(self.gap_cls, categories=list(GAP_CLASSES))})


def burstiness(trace: Trace, windows: int = 200,
               min_window_us: float = 10.0) -> list[DeviceBurstiness]:
    """One `DeviceBurstiness` per (rank, device) that ran GPU activity, in (rank, device) order.
    All devices at once on the DeviceTable (gpu_time.py): segment reductions, no loop over
    devices but to hand out each one's slices (20,000 ranks cost ~2 ms each a device at a time)."""
    if windows < 1:
        raise ValueError(f"windows must be at least 1, not {windows}")
    t = device_table(trace)
    if not len(t):
        return []
    # Launch start per GPU activity, in the table's order (NaN: launch not in the trace).
    links = gpu_launches(trace)  # one row per trace.gpu row, in the same order
    launch_ts = np.where(links["launch_row"].to_numpy() >= 0, links["launch_ts"].to_numpy(float), np.nan)
    pid, tid = links["pid"].to_numpy(np.int64), links["tid"].to_numpy(np.int64)
    first = np.minimum.reduceat(t.starts, t.bounds[:-1])
    last = np.maximum.reduceat(t.ends, t.bounds[:-1])
    window_us, w_bounds, window_starts, window_util = _timeline(t, first, last, windows, min_window_us)
    cv = per_segment(window_util, w_bounds, lambda m: np.stack((m.mean(axis=1), m.std(axis=1)), 1))
    b_values = _burstiness_b(t)
    g = _gaps(t, launch_ts[t.rows])
    summary = _gap_summary(len(t), g)
    out = []
    wb, gb = w_bounds.tolist(), g.bounds.tolist()
    for i, (rank, device) in enumerate(zip(t.rank.tolist(), t.device.tolist())):
        mean, std = (cv[i].tolist() if cv.ndim == 2 else (float("nan"), float("nan")))
        out.append(DeviceBurstiness(
            rank, device, float(window_us[i]), window_starts[wb[i]:wb[i + 1]], window_util[wb[i]:wb[i + 1]],
            (std / mean if mean > 0 else None) if wb[i + 1] > wb[i] else None, b_values[i], summary[i],
            g.start[gb[i]:gb[i + 1]], g.end[gb[i]:gb[i + 1]], g.cls[gb[i]:gb[i + 1]]))
    # The thread each gap is read from is the one that launched the gap's opening work
    # (idle.py); all devices' gaps go to idle.py together (one pass for all host threads, not
    # one per device: 1,000 GPUs over one host timeline were 1,000 passes over it).
    # with steps, the idle inside them before a device's first activity and after its last too
    # (idle.step_edges): host work before the first kernel of a step is idle time with a cause
    gap_dev, start, end, opener, extra = idle.step_edges(
        trace, t, np.repeat(np.arange(len(t)), np.diff(g.bounds)), g.start, g.end, g.opener,
        _first_openers(t, launch_ts[t.rows]))
    has = opener >= 0
    opener_row = t.rows[np.maximum(opener, 0)]
    act_dev = np.repeat(np.arange(len(t)), np.diff(t.bounds))
    gaps = idle.DeviceGaps(
        rank=t.rank, total=np.array([s["total_us"] for s in summary], dtype=float) + extra,
        gap_dev=gap_dev, start=start, end=end,
        opener_pid=np.where(has, pid[opener_row], -1), opener_tid=np.where(has, tid[opener_row], -1),
        act_dev=act_dev, act_pid=pid[t.rows], act_tid=tid[t.rows])
    for b, causes in zip(out, idle.device_idle_causes(trace, gaps)):
        b.idle_causes = causes
    return out


def _timeline(t: DeviceTable, first: np.ndarray, last: np.ndarray, windows: int, min_window_us: float):
    """Each device's window length, and its windows' starts and utilizations (window_bounds:
    device i's windows are [window_bounds[i], window_bounds[i + 1]))."""
    span = last - first
    window_us = np.maximum(span / windows, min_window_us)
    # Rounding can leave span / window_us a hair above an integer; that is not another window.
    n = np.where(span > 0, np.maximum(1, np.ceil(span / window_us - 1e-9)), 0).astype(np.int64)
    w_bounds = np.r_[0, np.cumsum(n)]
    dev = np.repeat(np.arange(len(n)), n)
    k = np.arange(len(dev)) - w_bounds[dev]
    # Window edges are laid out relative to the first activity: absolute trace clocks reach 1e15 us,
    # where a float64 step is 0.25 us and edges like first + k * window_us would not meet exactly.
    rel_starts = window_us[dev] * k
    rel_ends = np.minimum(rel_starts + window_us[dev], span[dev])
    rel_ends[w_bounds[1:][n > 0] - 1] = span[n > 0]
    block_dev = np.repeat(np.arange(len(n)), np.diff(t.block_bounds))
    bs, be = t.block_starts - first[block_dev], t.block_ends - first[block_dev]
    busy = (segment_covered_before(bs, be, t.block_bounds, dev, rel_ends)
            - segment_covered_before(bs, be, t.block_bounds, dev, rel_starts))
    return window_us, w_bounds, first[dev] + rel_starts, busy / (rel_ends - rel_starts)


@dataclass
class _Gaps:
    bounds: np.ndarray  # device i's gaps: [bounds[i], bounds[i + 1])
    start: np.ndarray
    end: np.ndarray
    cls: np.ndarray  # codes into GAP_CLASSES
    opener: np.ndarray  # the gap's opening activity, a position in the DeviceTable (-1: no launch known)


def _gaps(t: DeviceTable, launch_ts: np.ndarray) -> _Gaps:
    """Every device's gaps: between consecutive busy blocks of the device."""
    n_blocks = np.diff(t.block_bounds)
    is_last = np.zeros(len(t.block_starts), dtype=bool)
    is_last[t.block_bounds[1:] - 1] = True
    is_first = np.zeros(len(t.block_starts), dtype=bool)
    is_first[t.block_bounds[:-1]] = True
    gap_start, gap_end = t.block_ends[~is_last], t.block_starts[~is_first]
    bounds = np.r_[0, np.cumsum(n_blocks - 1)]
    gap_dev = np.repeat(np.arange(len(t)), n_blocks - 1)
    # The launch that matters for a gap is the earliest one among the activities starting exactly
    # when the next block starts (an unknown launch counts as never: it cannot show host wait).
    act_dev = np.repeat(np.arange(len(t)), np.diff(t.bounds))
    order = np.lexsort((t.starts, act_dev))  # by device, then start (stable)
    sorted_starts, sorted_dev = t.starts[order], act_dev[order]
    sorted_launch = np.where(np.isnan(launch_ts[order]), np.inf, launch_ts[order])
    new_start = np.flatnonzero(np.r_[True, (sorted_starts[1:] != sorted_starts[:-1])
                                     | (sorted_dev[1:] != sorted_dev[:-1])])
    earliest_launch = np.minimum.reduceat(sorted_launch, new_start)
    group_bounds = np.searchsorted(sorted_dev[new_start], np.arange(len(t) + 1))
    # gap_end is some activity's start: its group among the device's distinct starts
    group = segment_searchsorted(sorted_starts[new_start], group_bounds[gap_dev], group_bounds[gap_dev + 1],
                                 gap_end)
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
    return _Gaps(bounds, gap_start, gap_end, cls.astype(np.int8), opener)


_CLASS_CODE = {c: i for i, c in enumerate(GAP_CLASSES)}


def _first_openers(t: DeviceTable, launch_ts: np.ndarray) -> np.ndarray:
    """Per device, the activity opening its first busy block (as `_gaps` picks a gap's opener:
    the earliest launch among those starting first; -1 when none of their launches is known)."""
    out = np.full(len(t), -1, dtype=np.int64)
    if not len(t):
        return out
    first = np.minimum.reduceat(t.starts, t.bounds[:-1])
    act_dev = np.repeat(np.arange(len(t)), np.diff(t.bounds))
    known = np.flatnonzero((t.starts == first[act_dev]) & np.isfinite(launch_ts))
    if len(known):
        by = known[np.lexsort((known, launch_ts[known], act_dev[known]))]
        lead = by[np.r_[True, act_dev[by][1:] != act_dev[by][:-1]]]
        out[act_dev[lead]] = lead
    return out


def _gap_summary(n_devices: int, g: _Gaps) -> list[dict]:
    """Each device's `gaps` object: count, percentiles, max and total of the gap lengths (as
    np.percentile, max and sum of the device's own array give them), and per class the count
    and the exactly rounded total (math.fsum)."""
    dur = g.end - g.start
    stats = per_segment(dur, g.bounds, lambda m: np.column_stack(
        (np.percentile(m, [50, 90, 99], axis=1).T, m.max(axis=1), m.sum(axis=1))))
    gap_dev = np.repeat(np.arange(n_devices), np.diff(g.bounds))
    key = gap_dev * len(GAP_CLASSES) + g.cls
    counts = np.bincount(key, minlength=n_devices * len(GAP_CLASSES)).reshape(n_devices, -1)
    totals = exact_sums(key, n_devices * len(GAP_CLASSES), total=dur)["total"].reshape(n_devices, -1)
    out = []
    for i, count in enumerate(np.diff(g.bounds).tolist()):
        if count:
            p50, p90, p99, top, total = stats[i].tolist()
            figures = {"p50_us": p50, "p90_us": p90, "p99_us": p99, "max_us": top}
        else:
            figures, total = {"p50_us": None, "p90_us": None, "p99_us": None, "max_us": None}, 0.0
        by_class = {c: {"count": int(counts[i, k]), "total_us": float(totals[i, k])}
                    for k, c in enumerate(GAP_CLASSES)}
        out.append({"count": count, **figures, "total_us": total, "by_class": by_class})
    return out


def _burstiness_b(t: DeviceTable) -> list[float | None]:
    """B of each device's kernel starts (None with fewer than 3 kernels or no spread)."""
    act_dev = np.repeat(np.arange(len(t)), np.diff(t.bounds))
    k_dev, k_start = act_dev[t.is_kernel], t.starts[t.is_kernel]
    order = np.lexsort((k_start, k_dev))
    k_dev, k_start = k_dev[order], k_start[order]
    counts = np.bincount(k_dev, minlength=len(t))
    # intervals between consecutive starts of a device: n - 1 of them for n kernels
    same = np.flatnonzero(k_dev[1:] == k_dev[:-1])
    intervals = k_start[same + 1] - k_start[same]
    i_bounds = np.r_[0, np.cumsum(np.maximum(counts - 1, 0))]
    ms = per_segment(intervals, i_bounds, lambda m: np.stack((m.mean(axis=1), m.std(axis=1)), 1))
    out: list[float | None] = []
    for i, n in enumerate(counts.tolist()):
        if n < 3:
            out.append(None)
            continue
        mu, sigma = ms[i].tolist()
        out.append((sigma - mu) / (sigma + mu) if sigma + mu > 0 else None)
    return out
