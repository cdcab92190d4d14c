"""Which event times fit a trace (docs/DESIGN.md, "Times that fit a trace").

An event's time does not fit when
- its start or its end (ts + dur) lies beyond +-2^53 us (`fits`): there a double's step is over
  1 us, so a duration is no longer held to the microsecond, and ts + dur may overflow to inf;
  2^53 us is year 2255 on Kineto's epoch clock (real traces: 1.4e12 to 1.7e15 us), and it is
  also where nanoseconds stop fitting an int64 (2^63 ns = 9.2e15 us, Perfetto's exports);
- it lasts longer than `DUR_RATIO` times the span of its file's starts and longer than
  `DUR_FLOOR_US` (`too_long`): on the 26 real traces of tests/data the longest event is at most
  1.62x that span (HTA's 128-rank sample), and the floor keeps a real long event where the
  starts say little (a lone event, a GPU-only trace with one hung kernel).
Such events are skipped and counted with the malformed ones.
"""
from __future__ import annotations

import numpy as np

MAX_ABS_US = 2.0**53   # 9.007e15 us: beyond, a double cannot hold whole microseconds
DUR_RATIO = 1000.0     # a duration over 1000x the span of the file's starts is absurd ...
DUR_FLOOR_US = 86_400e6  # ... when it is also over a day


def within(times: np.ndarray) -> np.ndarray:
    """Which times lie within +-MAX_ABS_US (NaN and infinities do not)."""
    with np.errstate(invalid="ignore"):
        return np.abs(times) < MAX_ABS_US


def fits(ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Which events start and end within +-MAX_ABS_US (ts finite, dur finite and >= 0)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return within(ts) & within(ts + dur)


def duration_limit(starts: list[np.ndarray]) -> float:
    """The longest duration that fits a file whose events start at `starts`."""
    starts = [s for s in starts if len(s)]
    if not starts:
        return np.inf
    span = max(float(s.max()) for s in starts) - min(float(s.min()) for s in starts)
    return max(DUR_RATIO * span, DUR_FLOOR_US)


def too_long(dur: np.ndarray, limit: float) -> np.ndarray:
    """Positions of the durations over `limit`."""
    return np.flatnonzero(dur > limit)
