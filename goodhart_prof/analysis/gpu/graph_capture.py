"""Graph capture: the host recording a CUDA/HIP graph (`cudaStreamBeginCapture` ..
`cudaStreamEndCapture`, `hip...` on ROCm). Launches made while a stream captures are recorded
into the graph and run no kernel, so the GPU sits idle through a capture however much the host
launches: that idle time is the capture's (one-time setup: torch.compile's cudagraphs, vLLM's
and SGLang's graph capture at start-up), not the loop's. The utilization rules leave it out.

`capture_windows`: per rank, the merged [start, end) windows from each begin-capture call's start
to the end of the first end-capture call after it on the same thread; `captured_us`: how much of
an interval those windows cover.
"""
from __future__ import annotations

import re

import numpy as np

from ...trace.model import Trace, name_codes
from ..intervals import merge_intervals, thread_groups
from ..memo import derived

CAPTURE_CALL = re.compile(r"^(cuda|hip)Stream(Begin|End)Capture")


def capture_windows(trace: Trace) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """rank -> (starts, ends) of its merged capture windows (built once per trace: memo.py)."""
    return derived(trace, "capture_windows", _capture_windows)


def _capture_windows(trace: Trace) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    ev = trace.events
    found = name_codes(ev, CAPTURE_CALL)  # each distinct name tested once
    if not len(found):
        return {}
    names = ev["name"].cat.categories
    begin_codes = [c for c in found.tolist() if "Begin" in str(names[c])]
    codes = ev["name"].cat.codes.to_numpy()
    rows = np.flatnonzero(np.isin(codes, found))
    calls = ev.iloc[rows]
    ts, end = calls["ts"].to_numpy(float), calls["end"].to_numpy(float)
    begins = np.isin(codes[rows], begin_codes)
    windows: dict[int, list[tuple[float, float]]] = {}
    for (rank, _, _), at in thread_groups(calls).items():
        at = at[np.argsort(ts[at], kind="stable")]
        open_at = None
        for i in at.tolist():
            if begins[i]:
                open_at = ts[i] if open_at is None else open_at  # nested begins: the outermost
            elif open_at is not None:
                windows.setdefault(int(rank), []).append((open_at, end[i]))
                open_at = None
    out = {}
    for rank, pairs in windows.items():
        s, e = np.array(pairs, dtype=float).T
        out[rank] = merge_intervals(s, e)
    return out


def captured_us(trace: Trace, rank: int, lo: float, hi: float) -> float:
    """How much of [lo, hi] the rank's capture windows cover."""
    found = capture_windows(trace).get(int(rank))
    if found is None:
        return 0.0
    s, e = found
    return float(np.clip(np.minimum(e, hi) - np.maximum(s, lo), 0.0, None).sum())


def capture_count(trace: Trace, rank: int) -> int:
    found = capture_windows(trace).get(int(rank))
    return 0 if found is None else len(found[0])
