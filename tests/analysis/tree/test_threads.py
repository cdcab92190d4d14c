"""Which stretch of a per-thread table each thread owns (analysis/tree/threads.py): `ThreadSpans`
finds the thread of (rank, pid, tid) queries, and the last row of a thread starting by a time,
on small hand-made tables and against a search per query on large random ones."""
from __future__ import annotations

import numpy as np

from goodhart_prof.analysis.tree.threads import ThreadSpans


def _spans(bounds: np.ndarray) -> ThreadSpans:
    return ThreadSpans({(0, 1, t): (int(a), int(b)) for t, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))})


def test_lookup_numbers_threads_in_the_order_given():
    spans = ThreadSpans({(0, 10, 5): (0, 3), (0, 10, 2): (3, 4), (1, 10, 5): (4, 9)})
    assert len(spans) == 3
    got = spans.lookup([1, 0, 0, 0, 2], [10, 10, 10, 11, 10], [5, 2, 5, 5, 5])
    assert got.tolist() == [2, 1, 0, -1, -1]  # (0, 11, 5) and rank 2: not among these threads
    assert ThreadSpans({}).lookup([0], [1], [2]).tolist() == [-1]
    assert spans.lookup([], [], []).tolist() == []


def test_latest_starting_on_a_hand_made_table():
    # thread 0 owns rows 0..2 (ts 10, 20, 30), thread 1 rows 3..4 (ts 5, 50)
    spans = ThreadSpans({(0, 1, 1): (0, 3), (0, 1, 2): (3, 5)})
    ts = np.array([10.0, 20.0, 30.0, 5.0, 50.0])
    thread = np.array([0, 0, 0, 1, 1, -1])
    q = np.array([9.0, 20.0, 99.0, 4.0, 49.0, 30.0])
    # before thread 0's first row: none; at a start: that row; after its last: its last row;
    # thread 1 before its first: none; between its rows: row 3; no thread: none
    assert spans.latest_starting(ts, thread, q).tolist() == [-1, 1, 2, -1, 3, -1]


def test_latest_starting_per_run_equals_search_per_query():
    rng = np.random.default_rng(5)
    sizes = np.array([0, 5000, 3, 7000, 1])
    bounds = np.r_[0, np.cumsum(sizes)]
    ts = np.concatenate([np.sort(np.round(rng.uniform(0, 1000, s), 1)) for s in sizes])
    spans = _spans(bounds)
    # runs of one thread (sorted within a run: the merged search), -1 threads among them
    thread = np.repeat([1, 3, -1, 0, 3, 2, 4, 1], [9000, 12000, 5, 10, 40, 7, 6000, 3])
    q = np.concatenate([np.sort(np.round(rng.uniform(-10, 1010, n), 1))
                        for n in (9000, 12000, 5, 10, 40, 7, 6000, 3)])
    want = np.full(len(q), -1)
    for i, (t, x) in enumerate(zip(thread.tolist(), q.tolist())):
        if t >= 0:
            a, b = bounds[t], bounds[t + 1]
            k = int(np.searchsorted(ts[a:b], x, side="right"))
            want[i] = a + k - 1 if k else -1
    np.testing.assert_array_equal(spans.latest_starting(ts, thread, q), want)
    mixed = rng.permutation(len(q))  # thousands of runs: the segment_searchsorted path
    np.testing.assert_array_equal(spans.latest_starting(ts, thread[mixed], q[mixed]), want[mixed])
    assert (want >= 0).sum() > 20000
