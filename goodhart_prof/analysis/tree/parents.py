"""Parents in a thread's events without a Python loop over them (the tree package's docstring
says how); `climb` walks them up to the first that reaches far enough."""
from __future__ import annotations

import numpy as np


def start_order(ts: np.ndarray, dur: np.ndarray, thread: "np.ndarray | None" = None) -> np.ndarray:
    """Order by start, longer first on ties (stable otherwise); with `thread`, by thread first
    (`np.lexsort((-dur, ts, thread))`). Trace events come sorted by start (each thread's, in
    rows grouped by thread), so only runs of equal starts need sorting (a full lexsort of
    millions costs a second)."""
    n = len(ts)
    order = np.arange(n)
    if n < 2:
        return order
    step = np.diff(ts)
    if thread is None:
        if (step < 0).any():
            return np.lexsort((-dur, ts))
        same = step == 0
    else:
        rise = np.diff(thread)
        # NaN starts compare false: they take the full lexsort, which orders them as it does
        if (rise < 0).any() or not ((step >= 0) | (rise > 0)).all():
            return np.lexsort((-dur, ts, thread))
        same = (step == 0) & (rise == 0)
    tie = np.zeros(n, dtype=bool)
    tie[1:] |= same
    tie[:-1] |= same
    slots = np.flatnonzero(tie)
    if len(slots):  # runs of equal (thread, start) are contiguous: sorted in place
        keys = (-dur[slots], ts[slots]) + (() if thread is None else (thread[slots],))
        order[slots] = slots[np.lexsort(keys)]
    return order


def holder_parents(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """parent[i] = the largest j < i with end[j] >= end[i] (-1: none), for one thread's events
    in start order (longer first on ties)."""
    return parents_and_depths(ts, end)[0]


def parents_and_depths(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """holder_parents, and the number of ancestors of each event."""
    return parents_depths_ranks(ts, end)[:2]


def parents_depths_ranks(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """parents_and_depths, and each end's dense rank among the ends (equal ends, equal ranks:
    ends compared as integers, by whoever needs to)."""
    n = len(ts)
    if n == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    by_end = np.argsort(end, kind="stable")
    ends = end[by_end]
    distinct = np.ones(n, dtype=bool)
    distinct[1:] = ends[1:] != ends[:-1]
    rank = np.empty(n, dtype=np.int64)  # ends as dense ranks: exact integer comparisons below
    rank[by_end] = np.cumsum(distinct) - 1
    # Earlier events closed at our start: ended by it. Events later in a tie group that have no
    # duration end "by" our start too, but are not earlier: not counted. (An instant that an
    # earlier event ends exactly at is held by it; depth then counts one too few and the check
    # below sends it to the direct search.) Closed counts never fall along the order, so depth
    # rises by at most one per event, which the check relies on.
    closed = np.searchsorted(ends, ts, side="right")
    zero = np.flatnonzero(end <= ts)
    if len(zero):
        zero_ts, counts = np.unique(ts[zero], return_counts=True)
        at = np.minimum(np.searchsorted(zero_ts, ts), len(zero_ts) - 1)
        closed -= np.where(zero_ts[at] == ts, counts[at], 0)
        closed[zero] += np.arange(len(zero)) - np.searchsorted(ts[zero], ts[zero], side="left")
    depth = np.arange(n) - closed
    parent = np.full(n, -1, dtype=np.int64)
    if depth.min() < 0:  # not a nesting at all: no shortcut
        parent = _search_parents(end, np.arange(n), parent)
        return parent, depths(parent), rank
    # Candidate: the last earlier event one level up. Events by depth, then position (a radix
    # sort on small integers); per level, one sorted search among the level above.
    by_depth = np.argsort(depth.astype(np.int16) if depth.max() < 2 ** 15 else depth, kind="stable")
    levels = np.searchsorted(depth[by_depth], np.arange(int(depth.max()) + 2))
    for d in range(1, len(levels) - 1):
        above, here = by_depth[levels[d - 1]:levels[d]], by_depth[levels[d]:levels[d + 1]]
        j = np.searchsorted(above, here) - 1
        ok = j >= 0
        parent[here[ok]] = above[j[ok]]
    bad = _unconfirmed(rank, depth, parent, by_depth, levels)
    if bad.any():
        parent = _search_parents(end, np.flatnonzero(bad), parent)
        return parent, depths(parent), rank
    return parent, depth, rank


def _unconfirmed(rank: np.ndarray, depth: np.ndarray, parent: np.ndarray, by_depth: np.ndarray,
                 levels: np.ndarray) -> np.ndarray:
    """Candidates that break the definition (ends given as ranks). Between a candidate parent p
    and i lie only the subtrees of i's earlier siblings (depth rises by at most one per event),
    so p is the parent iff end[p] >= end[i] and the latest end among those subtrees is below
    end[i]; a root needs every earlier end below its own. `by_depth` orders the events by depth,
    then position (`levels`: where each depth starts): within a level, candidate parents never
    decrease."""
    n = len(rank)
    sub = rank.copy()  # latest end in each subtree
    for d in range(int(depth.max()), 0, -1):  # deepest first, each level one reduceat
        nodes = by_depth[levels[d]:levels[d + 1]]
        nodes = nodes[parent[nodes] >= 0]
        if len(nodes):
            par = parent[nodes]
            runs = np.flatnonzero(np.concatenate(([True], par[1:] != par[:-1])))
            up = par[runs]
            sub[up] = np.maximum(sub[up], np.maximum.reduceat(sub[nodes], runs))
    # Latest end among earlier siblings' subtrees: in by_depth order siblings are contiguous and
    # by position, so one cumulative max over (sibling group, subtree end) keys.
    kids = by_depth[parent[by_depth] >= 0]
    latest = np.full(n, -1, dtype=np.int64)
    if len(kids):
        g = parent[kids]
        first = np.ones(len(kids), dtype=bool)
        first[1:] = g[1:] != g[:-1]
        group = np.cumsum(first)  # rises along the order, so one max runs over all groups
        running = np.maximum.accumulate(group * (n + 1) + sub[kids])
        before = np.concatenate(([-1], running[:-1]))
        latest[kids] = np.where(first, -1, before - group * (n + 1))
    prefix = np.concatenate(([-1], np.maximum.accumulate(rank)[:-1]))  # roots: every earlier end
    has = parent >= 0
    root_bad = ~has & ((depth > 0) | (prefix >= rank))
    kid_bad = has & ((rank[np.maximum(parent, 0)] < rank) | (latest >= rank))
    return root_bad | kid_bad


def _search_parents(end: np.ndarray, todo: np.ndarray, parent: np.ndarray, block: int = 256) -> np.ndarray:
    """The definition, searched directly for the events in `todo` (block maxima of the ends make
    each search O(block + n / block))."""
    pad = (-len(end)) % block
    block_max = np.concatenate((end, np.full(pad, -np.inf))).reshape(-1, block).max(axis=1)
    for i in todo.tolist():
        parent[i] = _latest_reaching(end, block_max, i - 1, end[i], block)
    return parent


def _latest_reaching(end: np.ndarray, block_max: np.ndarray, k: int, reach: float, block: int) -> int:
    """Largest j <= k with end[j] >= reach, -1 if none."""
    if k < 0:
        return -1
    b = k // block
    lo = b * block
    hit = np.flatnonzero(end[lo:k + 1] >= reach)
    if len(hit):
        return int(lo + hit[-1])
    blocks = np.flatnonzero(block_max[:b] >= reach)
    if not len(blocks):
        return -1
    lo = int(blocks[-1]) * block
    return int(lo + np.flatnonzero(end[lo:lo + block] >= reach)[-1])


def depths(parent: np.ndarray) -> np.ndarray:
    """Number of ancestors of each node (pointer doubling: log2(max depth) passes)."""
    dist = (parent >= 0).astype(np.int64)  # distance from each node to `jump`, or to its root
    jump = parent.copy()
    live = np.flatnonzero(jump >= 0)
    while len(live):
        up = jump[live]
        dist[live] = dist[live] + dist[up]
        jump[live] = jump[up]
        live = live[jump[live] >= 0]
    return dist


def climb(start: np.ndarray, reach: np.ndarray, end: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """From each start node, up the parents to the first node whose end reaches `reach` (-1:
    none). With holder parents that node is the latest one at or before start reaching that far:
    a parent is the latest earlier node reaching further than its child."""
    cur = start.copy()
    if not len(end):
        return cur
    # only the starts still climbing are followed (most stop at once); end[-1] is masked off
    live = np.flatnonzero((cur >= 0) & (end[cur] < reach))
    while len(live):
        up = parent[cur[live]]
        cur[live] = up
        live = live[up >= 0]
        live = live[end[cur[live]] < reach[live]]
    return cur
