"""The cheaper searches under the idle-cause attribution give what the plain ones give:
searchsorted_many against np.searchsorted, climb against a walk up the parents one query at a time."""
from __future__ import annotations

import numpy as np

from goodhart_prof.analysis import intervals
from goodhart_prof.analysis.intervals import searchsorted_many
from goodhart_prof.analysis.tree.parents import climb, holder_parents, start_order
from tests.support.paths import DATA


def test_searchsorted_many_equals_numpy_sorted_ties_nan_and_unsorted():
    rng = np.random.default_rng(3)
    values = np.sort(np.round(rng.exponential(50.0, 900), 0))  # many ties among the values
    values = np.r_[values, np.nan]  # NaN sorts last: never before a number
    sorted_q = np.sort(np.r_[np.round(rng.exponential(50.0, 9000), 0), values[:300]])
    unsorted_q = rng.permutation(sorted_q)
    for q in (sorted_q, unsorted_q, np.r_[sorted_q, np.nan], sorted_q[:100]):
        for side in ("left", "right"):
            got = searchsorted_many(values, q, side)
            np.testing.assert_array_equal(got, np.searchsorted(values, q, side))
    # the merged path is the one the sorted queries take (long enough, twice the values)
    assert len(sorted_q) >= intervals.MERGE_MIN_QUERIES and len(sorted_q) >= 2 * len(values)
    assert searchsorted_many(values, sorted_q, "right")[-1] == 900  # all numbers, not the NaN
    assert searchsorted_many(values[:0], sorted_q, "left").tolist() == [0] * len(sorted_q)


def test_climb_equals_walking_up_each_query():
    rng = np.random.default_rng(11)
    ts = np.sort(np.round(rng.uniform(0, 1000, 3000), 0))
    end = ts + np.round(rng.exponential(30.0, 3000), 0)
    parent = holder_parents(ts, end)
    start = rng.integers(-1, 3000, 5000)
    reach = np.where(start >= 0, end[np.maximum(start, 0)], 0) + np.round(rng.exponential(40.0, 5000), 0)
    want = []
    for s, r in zip(start.tolist(), reach.tolist()):
        while s >= 0 and end[s] < r:
            s = int(parent[s])
        want.append(s)
    got = climb(start, reach, end, parent)
    np.testing.assert_array_equal(got, want)
    assert (got >= 0).sum() > 1000 and (got != start).sum() > 1000


def test_start_order_by_thread_equals_lexsort():
    """start_order with threads: rows grouped by thread and sorted by start within it (ties of
    equal starts, across threads too) give np.lexsort((-dur, ts, thread)); rows that are not
    take the lexsort itself."""
    rng = np.random.default_rng(2)
    thread = np.sort(rng.integers(0, 6, 4000))
    ts = np.concatenate([np.sort(rng.integers(0, 300, n)).astype(float) for n in np.bincount(thread)])
    dur = rng.integers(0, 5, 4000).astype(float)
    want = np.lexsort((-dur, ts, thread))
    got = start_order(ts, dur, thread)
    np.testing.assert_array_equal(got, want)
    assert (got != np.arange(4000)).sum() > 500  # ties were reordered
    shuffled = rng.permutation(4000)
    np.testing.assert_array_equal(start_order(ts[shuffled], dur[shuffled], thread[shuffled]),
                                  np.lexsort((-dur[shuffled], ts[shuffled], thread[shuffled])))
    np.testing.assert_array_equal(start_order(ts[:300], dur[:300]), np.lexsort((-dur[:300], ts[:300])))


def test_end_rank_orders_each_threads_ends_both_ways(monkeypatch):
    """HostTree.end_rank: within each thread, ranks compare as the ends do (equal ends, equal
    ranks), whether the tree is built thread by thread or for all threads at once."""

    from goodhart_prof.analysis.tree import host
    from goodhart_prof.trace.load import load
    path = DATA / "hta" / "v100_ddp_rank1.json.gz"
    trees = [host._build(load(path, progress=False))]
    monkeypatch.setattr(host, "MANY_THREADS", 0)
    trees.append(host._build(load(path, progress=False)))
    for tree in trees:
        assert len(tree.threads) >= 2
        for a, b in tree.threads.values():
            end, rank = tree.end[a:b], tree.end_rank[a:b]
            by = np.argsort(end, kind="stable")
            dense = np.r_[0, np.cumsum(end[by][1:] != end[by][:-1])]
            np.testing.assert_array_equal(rank[by] - rank[by][0], dense)
    np.testing.assert_array_equal(trees[0].parent, trees[1].parent)


def test_stable_order_equals_numpy_stable_argsort():
    from goodhart_prof.analysis.intervals import stable_order
    rng = np.random.default_rng(6)
    for codes in (rng.integers(0, 156, 50000), rng.integers(0, 2 ** 16, 50000), rng.integers(0, 2 ** 40, 5000),
                  rng.integers(-3, 100, 5000), rng.integers(0, 9, 5000).astype(np.int8), np.zeros(0, dtype=np.int64)):
        np.testing.assert_array_equal(stable_order(codes), np.argsort(codes, kind="stable"))
