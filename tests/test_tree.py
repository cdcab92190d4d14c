"""The host call tree (analysis/tree.py): parents against their definition, columns on real traces."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from goodhart_prof.analysis.tree import depths, holder_parents, host_tree, start_order
from goodhart_prof.analysis.tree.parents import parents_and_depths
from goodhart_prof.trace.load import load

from pathlib import Path

DATA = Path(__file__).parent / "data"


def _reference_parents(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The definition, literally: the latest earlier event whose end reaches ours."""
    out = np.full(len(ts), -1)
    for i in range(len(ts)):
        for j in range(i - 1, -1, -1):
            if end[j] >= end[i]:
                out[i] = j
                break
    return out


def _reference_depths(parent: np.ndarray) -> np.ndarray:
    out = np.zeros(len(parent), dtype=np.int64)
    for i, p in enumerate(parent):
        while p >= 0:
            out[i] += 1
            p = parent[p]
    return out


def _nested(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Properly nested intervals on an integer clock (shared edges and instants included)."""
    ts, dur = [], []

    def fill(a: int, b: int, level: int) -> None:
        t = a
        while t < b and len(ts) < n:
            s = t + int(rng.integers(0, 2))
            e = min(b, s + int(rng.integers(0, 6)))
            if e < s:
                return
            ts.append(s)
            dur.append(e - s)
            if level < 4:
                fill(s, e, level + 1)
            t = e + int(rng.integers(0, 2))
    fill(0, 30, 0)
    return np.array(ts, float), np.array(dur, float)


@pytest.mark.parametrize("kind", ["nested", "random"])
def test_parents_and_depths_match_the_definition(kind):
    rng = np.random.default_rng(7)
    for _ in range(1500):
        n = int(rng.integers(1, 40))
        if kind == "nested":
            ts, dur = _nested(rng, n)
            if not len(ts):
                continue
        else:  # partial overlaps, equal stamps, instants
            ts = rng.integers(0, 20, n).astype(float)
            dur = rng.integers(0, 8, n).astype(float)
        order = start_order(ts, dur)
        ts, end = ts[order], ts[order] + dur[order]
        parent = holder_parents(ts, end)
        expected = _reference_parents(ts, end)
        np.testing.assert_array_equal(parent, expected)
        np.testing.assert_array_equal(depths(parent), _reference_depths(expected))
        np.testing.assert_array_equal(parents_and_depths(ts, end)[1], _reference_depths(expected))


def test_tree_columns_on_the_owlv2_trace():
    trace = load(DATA / "tracelens" / "h100_owlv2_inference.json.gz", progress=False)
    tree = host_tree(trace)
    ev = trace.events
    host = ev[ev["cat"].isin(["cpu_op", "user_annotation"]).to_numpy()]
    assert len(tree) == len(host) == 24378 + 7
    assert host_tree(trace) is tree  # built once
    # Every parent holds its child and starts no later.
    has = tree.parent >= 0
    par = tree.parent[has]
    assert (tree.ts[par] <= tree.ts[has]).all() and (tree.end[par] >= tree.end[has]).all()
    assert (tree.depth[has] == tree.depth[par] + 1).all() and (tree.depth[~has] == 0).all()
    # A top-level op is its own top_op; an op under another op is not.
    top = tree.top_op
    ops = np.flatnonzero(tree.is_op)
    assert (top[ops] >= 0).all()
    assert (tree.is_op[top[ops]]).all()
    nested_ops = ops[top[ops] != ops]
    assert len(nested_ops) > 0 and (tree.depth[nested_ops] > tree.depth[top[nested_ops]]).all()
    # enclosing() of each node's own interval is the node itself (or an identical holder before it).
    found = tree.enclosing(tree.rank, tree.pid, tree.tid, tree.ts, tree.end)
    assert (found >= 0).all()
    assert (tree.ts[found] <= tree.ts).all() and (tree.end[found] >= tree.end).all()


def test_enclosing_an_instant_between_two_ops():
    events = pd.DataFrame({"ts": [0.0, 10.0], "end": [5.0, 20.0]})
    ts, end = events["ts"].to_numpy(), events["end"].to_numpy()
    parent = holder_parents(ts, end)
    np.testing.assert_array_equal(parent, [-1, -1])
