"""The host call tree (analysis/tree.py): parents against their definition, columns on real traces."""
from __future__ import annotations

import json

import numpy as np
import pytest

from goodhart_prof.analysis.tree import depths, holder_parents, host_tree, start_order
from goodhart_prof.analysis.tree.parents import parents_and_depths
from goodhart_prof.trace.load import load
from tests.support.events import X

from tests.support.paths import DATA



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

    # chains of many nodes at once are chain() node by node (-1: the empty chain)
    nodes = np.r_[np.arange(0, len(tree), 97), -1, ops[:50]]
    assert tree.chains(nodes) == [tree.chain(int(n)) if n >= 0 else () for n in nodes]
    assert tree.chains(nodes, skip=None) == [tree.chain(int(n), None) if n >= 0 else () for n in nodes]
    assert tree.chains(np.array([], dtype=np.int64)) == []

def test_enclosing_an_instant_between_two_ops(tmp_path):
    # two sibling ops on one thread, [0, 5] and [10, 20], the second holding a child [12, 14]:
    # neither is the other's parent, and an instant (ts == end) in the hole between them, at 7,
    # is held by nothing; instants inside (3, 13, 17) and on the edges (5: [0, 5] ends at or after
    # it; 10) are held by the innermost op there; another thread's instant at 3 by nothing
    events = [X("aten::a", "cpu_op", 0, 5), X("aten::b", "cpu_op", 10, 10), X("aten::c", "cpu_op", 12, 2)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    tree = host_tree(load(path, progress=False))
    np.testing.assert_array_equal(holder_parents(np.array([0.0, 10.0]), np.array([5.0, 20.0])), [-1, -1])
    at = np.array([7.0, 3.0, 5.0, 10.0, 13.0, 17.0, 3.0])
    tid = np.array([100, 100, 100, 100, 100, 100, 101])
    n = len(at)
    found = tree.enclosing(np.full(n, tree.rank[0]), np.full(n, 100), tid, at, at)
    node = {float(t): i for i, t in enumerate(tree.ts)}  # each op by its start
    assert found.tolist() == [-1, node[0], node[0], node[10], node[12], node[10], -1]
    # an interval reaching across the hole is held by nothing either
    assert tree.enclosing(tree.rank[:1], np.array([100]), np.array([100]), np.array([4.0]),
                          np.array([11.0])).tolist() == [-1]


def test_climb_to_the_nearest_wanted_node(tmp_path):
    # one thread: op a [0, 100] holds annotation b [10, 80], which holds op c [20, 60], which
    # holds annotation d [30, 40]; op e [200, 10] stands alone
    events = [X("aten::a", "cpu_op", 0, 100), X("b", "user_annotation", 10, 70),
              X("aten::c", "cpu_op", 20, 40), X("d", "user_annotation", 30, 10), X("aten::e", "cpu_op", 200, 10)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    tree = host_tree(load(path, progress=False))
    node = {tree.names[c]: i for i, c in enumerate(tree.name)}
    a, b, c, d, e = (node[n] for n in ("aten::a", "b", "aten::c", "d", "aten::e"))
    nodes = np.array([d, c, b, a, e, -1])
    # the nearest op, the node itself included: d -> c, b -> a
    assert tree.climb_to(nodes, tree.is_op).tolist() == [c, c, a, a, e, -1]
    # the nearest annotation: none above a or e
    assert tree.climb_to(nodes, tree.is_annotation).tolist() == [d, b, b, -1, -1, -1]
    # the same answers as the whole-tree verb, where the node itself is not wanted
    assert tree.nearest(tree.is_op)[[d, b]].tolist() == [c, a]
