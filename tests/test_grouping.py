"""The numpy grouping helpers the analyses share instead of pandas groupby."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from goodhart_prof.analysis.intervals import thread_groups
from goodhart_prof.analysis.kernels import _groups


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
