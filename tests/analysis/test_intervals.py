"""The numpy grouping helpers the analyses share instead of pandas groupby."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from goodhart_prof.analysis.intervals import (covered_before, first_positions, occurs_once, segment_covered_before,
                                              sorted_group_sums, sorted_rows, thread_groups)
from goodhart_prof.analysis.gpu.kernels import _groups


def test_thread_groups_match_pandas_groupby():
    rng = np.random.default_rng(7)
    n = 5000
    frame = pd.DataFrame({"rank": rng.integers(0, 3, n).astype(np.int32),
                          "pid": rng.choice([11, 2**40, -2], n),
                          "tid": rng.choice([5, 6, 7, 140234234234], n)})
    ours = thread_groups(frame)
    ref = frame.groupby(["rank", "pid", "tid"]).indices
    assert set(ours) == {tuple(int(v) for v in k) for k in ref}
    for key, pos in ours.items():
        assert pos.tolist() == sorted(ref[key].tolist())  # ascending positions, same rows
    assert list(ours) == sorted(ours)  # keys in (rank, pid, tid) order
    assert sum(len(p) for p in ours.values()) == n


def test_thread_groups_other_keys_and_empty():
    frame = pd.DataFrame({"rank": [1, 0, 1, 0], "device": [3, 3, 2, 3]})
    groups = thread_groups(frame, ("rank", "device"))
    assert {k: v.tolist() for k, v in groups.items()} == {(0, 3): [1, 3], (1, 2): [2], (1, 3): [0]}
    assert thread_groups(frame.iloc[:0]) == {}


def test_groups_exact_sums_in_first_appearance_order():
    key = np.array([5, 2, 5, 9, 2, 5])
    values = np.array([0.1, 1e16, 0.2, 3.0, 1.0, 0.3])
    g = _groups(key, values)
    assert g["key"].tolist() == [5, 2, 9]
    assert g["count"].tolist() == [3, 2, 1]
    assert g["sum"].tolist() == [math.fsum([0.1, 0.2, 0.3]), math.fsum([1e16, 1.0]), 3.0]
    assert g["min"].tolist() == [0.1, 1.0, 3.0] and g["max"].tolist() == [0.3, 1e16, 3.0]


def test_sorted_rows_is_a_stable_pandas_sort():
    rng = np.random.default_rng(3)
    n = 400
    frame = pd.DataFrame({"a": rng.integers(0, 4, n), "b": rng.choice([0.5, -0.0, 0.0, 2.0, np.nan], n),
                          "t": rng.choice(["x", "ab", "a", "B", "é"], n), "f": rng.integers(0, 2, n).astype(bool)},
                         index=rng.permutation(n))
    for keys, up in ((["a", "b"], True), (["b", "t"], [False, True]), (["t", "a", "f"], [True, False, False]),
                     (["b"], False)):
        ref = frame.sort_values(keys, ascending=up, kind="stable").reset_index(drop=True)
        pd.testing.assert_frame_equal(sorted_rows(frame, keys, up), ref)
    mixed = frame.assign(t=frame["t"].astype(object).where(frame["a"] > 0, None))  # not all texts
    pd.testing.assert_frame_equal(sorted_rows(mixed, ["t", "a"]),
                                  mixed.sort_values(["t", "a"], kind="stable").reset_index(drop=True))


def test_sorted_group_sums_match_a_pandas_groupby():
    rng = np.random.default_rng(5)
    n = 3000
    kind = rng.choice(np.array(["all_reduce", "broadcast", "all_gather"], dtype=object), n)
    site = rng.choice(np.array(["a > b", "a", "c > d > e", "b"], dtype=object), n)
    dur = rng.exponential(10.0, n) * rng.choice([1.0, 1e9], n)
    (k, s), count, total = sorted_group_sums([kind, site], dur)
    ref = pd.DataFrame({"kind": kind, "site": site, "dur": dur}).groupby(["kind", "site"], as_index=False).agg(
        count=("dur", "size"), total_us=("dur", "sum"))
    assert k.tolist() == ref["kind"].tolist() and s.tolist() == ref["site"].tolist()
    assert count.tolist() == ref["count"].tolist()
    assert total.tolist() == ref["total_us"].tolist()  # bit for bit: the same compensated sums


def test_first_positions_and_occurs_once():
    assert first_positions(np.array([2, 0, 2, 1, 0])).tolist() == [1, 3, 0]
    assert first_positions(np.array([], dtype=np.int64)).tolist() == []
    assert occurs_once(np.array([4, -1, 4, 7, -1, 2])).tolist() == [False, False, False, True, False, True]


def test_covered_before_one_set_and_per_segment():
    """Busy time up to t: segment 0 busy [0, 10] and [20, 30], segment 1 busy [5, 6] and
    [100, 150]; one set of blocks is one segment."""
    starts, ends = np.array([0.0, 20, 5, 100]), np.array([10.0, 30, 6, 150])
    bounds = np.array([0, 2, 4])
    t = np.array([-1.0, 5, 15, 25, 40, 0, 5.5, 50, 120, 200])
    segment = np.repeat([0, 1], 5)
    np.testing.assert_array_equal(segment_covered_before(starts, ends, bounds, segment, t),
                                  [0, 5, 10, 15, 20, 0, 0.5, 1, 21, 51])
    np.testing.assert_array_equal(covered_before(starts[:2], ends[:2], t[:5]), [0, 5, 10, 15, 20])
    assert covered_before(np.zeros(0), np.zeros(0), np.array([1.0, 2.0])).tolist() == [0.0, 0.0]
