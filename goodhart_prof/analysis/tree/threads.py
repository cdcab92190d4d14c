"""Which stretch of a per-thread table each thread owns, asked for many threads at once.

The host call tree and the Python frames both lay their rows out thread by thread (threads in
(rank, pid, tid) order, each in start order); `ThreadSpans` finds the thread of many
(rank, pid, tid) queries with one sort and searches each query's own thread with one binary
search for all of them (no loop over threads: 100,000 threads cost ~0.1 ms each that way).
"""
from __future__ import annotations

import numpy as np

from ..intervals import SEGMENT_LOOP_LIMIT, searchsorted_many, segment_searchsorted, tuple_codes


class ThreadSpans:
    """Threads numbered 0..n-1 in the order of `spans` ((rank, pid, tid) -> (first, last + 1))."""

    def __init__(self, spans: dict[tuple[int, int, int], tuple[int, int]]):
        n = len(spans)
        keys = np.array(list(spans), dtype=np.int64).reshape(n, 3)
        bounds = np.array(list(spans.values()), dtype=np.int64).reshape(n, 2)
        self.rank, self.pid, self.tid = keys[:, 0], keys[:, 1], keys[:, 2]
        self.lo, self.hi = bounds[:, 0], bounds[:, 1]

    def __len__(self) -> int:
        return len(self.lo)

    def lookup(self, rank, pid, tid) -> np.ndarray:
        """The number of each (rank, pid, tid)'s thread (-1: not one of these threads)."""
        rank, pid, tid = (np.asarray(x, dtype=np.int64) for x in (rank, pid, tid))
        out = np.full(len(rank), -1, dtype=np.int64)
        if not len(self) or not len(rank):
            return out
        codes = tuple_codes(np.concatenate((self.rank, rank)), np.concatenate((self.pid, pid)),
                            np.concatenate((self.tid, tid)))
        mine, theirs = codes[:len(self)], codes[len(self):]
        order = np.argsort(mine, kind="stable")
        j = np.minimum(np.searchsorted(mine[order], theirs), len(self) - 1)
        found = mine[order][j] == theirs
        out[found] = order[j[found]]
        return out

    def latest_starting(self, ts: np.ndarray, thread: np.ndarray, q: np.ndarray) -> np.ndarray:
        """For each query time q on thread `thread` (-1: none), the last row of that thread with
        ts <= q (-1: none or no thread); `ts` sorted within each thread."""
        q = np.asarray(q, dtype=float)
        out = np.full(len(q), -1, dtype=np.int64)
        runs = np.flatnonzero(thread[1:] != thread[:-1]) + 1 if len(q) else None
        if runs is not None and len(runs) < SEGMENT_LOOP_LIMIT:
            # queries in runs of one thread (a thread's cut times, its gaps): one C searchsorted
            # per run, no per-query bounds
            for a, b in zip([0] + runs.tolist(), runs.tolist() + [len(q)]):
                t = int(thread[a])
                if t >= 0:
                    lo = int(self.lo[t])
                    pos = searchsorted_many(ts[lo:int(self.hi[t])], q[a:b], side="right")
                    out[a:b] = np.where(pos > 0, pos + (lo - 1), -1)
            return out
        ok = np.flatnonzero(thread >= 0)
        if len(ok):
            lo, hi = self.lo[thread[ok]], self.hi[thread[ok]]
            pos = segment_searchsorted(ts, lo, hi, np.asarray(q, dtype=float)[ok], side="right") - 1
            out[ok] = np.where(pos >= lo, pos, -1)
        return out
