"""A plain file's events array read natively in windows, on two threads.

Each window of WINDOW_BYTES is read with one `pread` and cut after its last event (the next
window starts at the event after the cut, so nothing is copied and only the bytes of one event
are read twice); `columnar.events_tables` reads the window's events in place while the next
window is read and the previous one's tables are built (the parse runs without the GIL). At most
IN_FLIGHT windows are held at once, so memory follows the window size, not the file's.

A window the native decoder hands back (a cut inside a value, anything odd) makes the whole file
go the msgspec way (ranges.py over processes, or pieces.py): None here.
"""
from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from . import columnar
from .piece_tables import Piece
from .file_bytes import FileChanged, same_file
from .pieces import BOUNDARY, merge_headers
from .progress import Progress

WINDOW_BYTES = 48 << 20
IN_FLIGHT = 2


class _Handed(Exception):
    """A window the native decoder did not read."""


def last_cut(buf, n: int) -> "tuple[int, int] | None":
    """(index of the `}`, index of the `{`) of the last `}, {` in buf[:n], or None. The end is
    searched first (a copy of its last 64 KB; events are small), then more of it."""
    view = memoryview(buf)
    size = 1 << 16
    while True:
        lo = max(0, n - size)
        tail = bytes(view[lo:n])
        at = tail.rfind(b"}")
        while at >= 0:
            found = BOUNDARY.match(tail, at)
            if found is not None:
                return lo + at, lo + found.end() - 1
            at = tail.rfind(b"}", 0, at)
        if lo == 0:
            return None
        size *= 16


def file_events(path: Path, before: os.stat_result, start: int, end: int,
                progress: "Progress | None" = None) -> "list | None":
    """The events `start..end` of a plain file (`[` at start - 1, `]` at end) as native tables
    (Piece), in file order; None when a window is not read natively."""
    if not columnar.AVAILABLE:
        return None
    results = []
    try:
        with open(path, "rb") as fh, ThreadPoolExecutor(IN_FLIGHT) as pool:
            if not same_file(before, os.fstat(fh.fileno())):
                raise FileChanged(before, os.fstat(fh.fileno()))
            pending: deque = deque()
            # IN_FLIGHT + 1 buffers, reused: one being read while the others are parsed (a
            # fresh 48 MB buffer per window would fault its pages in every time)
            # (numpy's empty: not zeroed, its pages faulted in by the first read, not twice)
            buffers = [np.empty(min(WINDOW_BYTES, end - start), np.uint8)
                       for _ in range(min(IN_FLIGHT + 1, 1 + (end - start) // WINDOW_BYTES))]
            pos, k = start, 0
            while pos < end:
                while len(pending) >= IN_FLIGHT:
                    results.append(_done(pending.popleft(), progress))
                buf = buffers[k % len(buffers)]
                k += 1
                want = min(len(buf), end - pos)
                got = _read_at(fh, memoryview(buf)[:want], pos)
                if got < want:
                    raise FileChanged(before, os.fstat(fh.fileno()), pos + got)
                if pos + got < end:
                    cut = last_cut(buf, got)
                    if cut is None:
                        return None  # one event longer than a window
                    hi, step = cut[0] + 1, cut[1]
                else:
                    hi, step = got, got
                pending.append(pool.submit(_window, buf, hi))
                pos += step
            while pending:
                results.append(_done(pending.popleft(), progress))
            after = os.fstat(fh.fileno())
            if not same_file(before, after):
                raise FileChanged(before, after)
    except _Handed:
        return None
    return results


def _read_at(fh, view: memoryview, pos: int) -> int:
    """Read into `view` from offset `pos` (pread where the OS has it; no seek shared with others)."""
    if hasattr(os, "preadv"):
        return os.preadv(fh.fileno(), [view], pos)
    fh.seek(pos)
    return fh.readinto(view) or 0


def _window(chunk: bytes, hi: int) -> "tuple[Piece, int]":
    cols = columnar.parse(chunk, 0, hi)
    if cols is None:
        raise _Handed()
    return columnar.tables(cols, merge_headers([])), hi


def _done(future, progress: "Progress | None"):
    result, nbytes = future.result()
    if progress is not None:
        progress.add(nbytes, result)
    return result
