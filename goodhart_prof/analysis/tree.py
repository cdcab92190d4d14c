"""The host call tree: how the host events of each thread nest, built once per trace.

Nodes are the cpu ops and user annotations (`record_function` scopes, `ProfilerStep#N` included)
of every thread, in **tree order**: by (rank, pid, tid), then by start, longer first on ties, so a
parent always comes before its children. Columns, one numpy array each:

| column | meaning |
| --- | --- |
| row | the node's row label in trace.events |
| rank, pid, tid, ts, end | as in trace.events |
| name | the name's code in trace.events' `name` categories |
| is_op, is_annotation | cpu op / user annotation |
| parent | the innermost node holding it: the latest earlier node of its thread whose end is at or after its own end; -1 for a root |
| depth | number of ancestors |
| top_op | the outermost cpu op among its ancestors and itself (the op the code on the host called); -1: none |
| annotation | the innermost user annotation among its ancestors, `ProfilerStep#N` excluded; -1: none |
| iteration | N of the `ProfilerStep#N` of its rank (any thread) whose interval holds its start; -1 |

GPU work hangs off the tree through its launch call (`links.gpu_launches`: GPU activity -> launch
call, by `correlation`); a launch call, a sync call or any other interval finds its place with
`HostTree.enclosing`. Python frames (Trace.frames) nest the same way in a tree per thread
(`FrameNest`, built on demand), where a frame's parent is its Python parent id when recorded.

Everything in the analyses that asks "does this lie inside that" asks this module: the tree for
host events, and the interval queries at the end for spans a rule chooses (move ops, optimizer
steps) and items that are not host events (launch calls, sync points).

How parents are found without a Python loop over events: in a thread sorted by start, an event's
depth is the number of earlier events still open at its start (a searchsorted over the sorted
ends), and its parent is the last earlier event one level up. That is exact for properly nested
events; each candidate is then checked against the definition (its end reaches ours, and no event
in between does), and the few that fail (partial overlaps, equal stamps) are searched directly.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pandas as pd

from ..trace.model import Frames, Trace, name_codes, rows_named
from .intervals import thread_groups

STEP = re.compile(r"^ProfilerStep#(\d+)$")
HOST_CATS = ("cpu_op", "user_annotation")


# -- parents ---------------------------------------------------------------------------------------
def start_order(ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Order by start, longer first on ties (stable otherwise). Trace events come sorted by
    start, so only runs of equal starts need sorting (a full lexsort of millions costs a second)."""
    n = len(ts)
    order = np.arange(n)
    if n < 2:
        return order
    step = np.diff(ts)
    if (step < 0).any():
        return np.lexsort((-dur, ts))
    tie = np.zeros(n, dtype=bool)
    tie[1:] |= step == 0
    tie[:-1] |= step == 0
    slots = np.flatnonzero(tie)
    if len(slots):
        order[slots] = slots[np.lexsort((-dur[slots], ts[slots]))]
    return order


def holder_parents(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """parent[i] = the largest j < i with end[j] >= end[i] (-1: none), for one thread's events
    in start order (longer first on ties)."""
    n = len(ts)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    idx = np.arange(n)
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
    zero_ts = ts[zero]
    if len(zero):
        closed -= np.searchsorted(zero_ts, ts, side="right") - np.searchsorted(zero_ts, ts, side="left")
        closed[zero] += np.arange(len(zero)) - np.searchsorted(zero_ts, zero_ts, side="left")
    depth = idx - closed
    parent = np.full(n, -1, dtype=np.int64)
    if depth.min() < 0:  # not a nesting at all: no shortcut
        return _search_parents(end, idx, parent)
    # Candidate: the last earlier event one level up. Events by depth, then position (a radix
    # sort on small integers).
    by_depth = np.argsort(depth.astype(np.int16) if depth.max() < 2 ** 15 else depth, kind="stable")
    skey = depth[by_depth] * (n + 1) + by_depth
    pos = np.searchsorted(skey, (depth - 1) * (n + 1) + idx, side="left") - 1
    ok = (depth > 0) & (pos >= 0)
    ok[ok] = skey[pos[ok]] // (n + 1) == depth[ok] - 1
    parent[ok] = by_depth[pos[ok]]
    bad = _unconfirmed(rank, depth, parent, by_depth)
    if bad.any():
        parent = _search_parents(end, np.flatnonzero(bad), parent)
    return parent


def _unconfirmed(rank: np.ndarray, depth: np.ndarray, parent: np.ndarray, by_depth: np.ndarray
                 ) -> np.ndarray:
    """Candidates that break the definition (ends given as ranks). Between a candidate parent p
    and i lie only the subtrees of i's earlier siblings (depth rises by at most one per event),
    so p is the parent iff end[p] >= end[i] and the latest end among those subtrees is below
    end[i]; a root needs every earlier end below its own. `by_depth` orders the events by depth,
    then position: within a level, candidate parents never decrease."""
    n = len(rank)
    levels = np.searchsorted(depth[by_depth], np.arange(int(depth.max()) + 2))
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


# -- the tree --------------------------------------------------------------------------------------
@dataclass
class HostTree:
    """The host call tree of a trace (module docstring). Build with `host_tree(trace)`."""

    row: np.ndarray
    rank: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    name: np.ndarray
    names: np.ndarray  # name code -> name
    is_op: np.ndarray
    is_annotation: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    top_op: np.ndarray
    annotation: np.ndarray
    iteration: np.ndarray
    threads: dict[tuple[int, int, int], tuple[int, int]]  # thread -> (first, last + 1) in tree order
    node_of_row: np.ndarray = field(repr=False)  # row label -> node (-1: not a host node)

    def __len__(self) -> int:
        return len(self.row)

    def nodes(self, rows: np.ndarray) -> np.ndarray:
        """Node of each trace.events row label (-1: not a cpu op or annotation)."""
        rows = np.asarray(rows, dtype=np.int64)
        ok = (rows >= 0) & (rows < len(self.node_of_row))
        out = np.full(len(rows), -1, dtype=np.int64)
        out[ok] = self.node_of_row[rows[ok]]
        return out

    def enclosing(self, rank, pid, tid, ts, end) -> np.ndarray:
        """Innermost node holding each [ts, end] on its thread (-1: none): the latest node that
        starts at or before ts and ends at or after end. From the latest node starting by ts,
        climb parents until one reaches end (a parent is the latest earlier node reaching
        further, so the first found is the latest)."""
        rank, pid, tid = (np.asarray(x, dtype=np.int64) for x in (rank, pid, tid))
        ts, end = np.asarray(ts, dtype=float), np.asarray(end, dtype=float)
        out = np.full(len(ts), -1, dtype=np.int64)
        keys = pd.DataFrame({"rank": rank, "pid": pid, "tid": tid})
        for key, pos in thread_groups(keys).items():
            span = self.threads.get(key)
            if span is None:
                continue
            lo, hi = span
            out[pos] = lo + np.searchsorted(self.ts[lo:hi], ts[pos], side="right") - 1
            out[pos[out[pos] < lo]] = -1
        cur = out
        while True:
            short = np.flatnonzero(cur >= 0)
            short = short[self.end[cur[short]] < end[short]]
            if not len(short):
                return cur
            cur[short] = self.parent[cur[short]]

    def nearest(self, mask: np.ndarray) -> np.ndarray:
        """For each node, the nearest ancestor where mask is true (-1: none). One pass per depth
        level, parents first."""
        out = np.full(len(mask), -1, dtype=np.int64)
        for nodes in self._levels()[1:]:
            par = self.parent[nodes]
            out[nodes] = np.where(mask[par], par, out[par])
        return out

    def outermost(self, mask: np.ndarray) -> np.ndarray:
        """For each node, the outermost node among its ancestors and itself where mask is true."""
        out = np.where(mask, np.arange(len(mask)), -1)
        for nodes in self._levels()[1:]:
            up = out[self.parent[nodes]]
            out[nodes] = np.where(up >= 0, up, out[nodes])
        return out

    def chain(self, node: int, skip: "re.Pattern[str] | None" = STEP) -> tuple[str, ...]:
        """Names of the node's ancestors and the node, outermost first (without names that
        `skip` matches: ProfilerStep#N, so that chains add up across iterations)."""
        cache = self.__dict__.setdefault("_chains", {})
        todo = []
        while node >= 0 and node not in cache:
            todo.append(node)
            node = int(self.parent[node])
        chain = cache[node] if node >= 0 else ()
        for p in reversed(todo):
            name = str(self.names[self.name[p]])
            if skip is None or not skip.match(name):
                chain = chain + (name,)
            cache[p] = chain
        return chain

    def _levels(self) -> list[np.ndarray]:
        cached = self.__dict__.get("_by_level")
        if cached is None:
            order = np.argsort(self.depth, kind="stable")
            bounds = np.searchsorted(self.depth[order], np.arange(int(self.depth.max(initial=0)) + 2))
            cached = self.__dict__["_by_level"] = [order[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        return cached


def host_tree(trace: Trace) -> HostTree:
    """The host call tree of the trace, built once and cached on it."""
    tree = trace.cache.get("host_tree")
    if tree is None:
        tree = trace.cache["host_tree"] = _build(trace)
    return tree


def _build(trace: Trace) -> HostTree:
    ev = trace.events
    cat = ev["cat"]
    is_op_all = (cat == "cpu_op").to_numpy()
    sel = np.flatnonzero(is_op_all | (cat == "user_annotation").to_numpy())
    col = {c: ev[c].to_numpy()[sel] for c in ("rank", "pid", "tid", "ts", "dur", "end")}
    parts, threads, at = [], {}, 0
    groups = thread_groups(pd.DataFrame({c: col[c] for c in ("rank", "pid", "tid")}))
    parents = []
    for key, pos in groups.items():  # threads: a handful; numpy inside
        pos = pos[start_order(col["ts"][pos], col["dur"][pos])]
        parents.append(np.where((p := holder_parents(col["ts"][pos], col["end"][pos])) >= 0, p + at, -1))
        parts.append(pos)
        threads[key] = (at, at + len(pos))
        at += len(pos)
    order = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    parent = np.concatenate(parents) if parents else np.empty(0, dtype=np.int64)
    rows = ev.index.to_numpy(np.int64)[sel][order]
    codes = ev["name"].cat.codes.to_numpy()[sel][order].astype(np.int64)
    names = np.asarray(ev["name"].cat.categories, dtype=object)
    is_op = is_op_all[sel][order]
    step = np.zeros(len(names), dtype=bool)
    step[name_codes(ev, STEP)] = True
    is_step = step[codes] if len(codes) else np.zeros(0, dtype=bool)
    node_of_row = np.full(int(ev.index.max()) + 1 if len(ev) else 0, -1, dtype=np.int64)
    node_of_row[rows] = np.arange(len(rows))
    tree = HostTree(row=rows, rank=col["rank"][order], pid=col["pid"][order], tid=col["tid"][order],
                    ts=col["ts"][order], end=col["end"][order], name=codes, names=names,
                    is_op=is_op, is_annotation=~is_op, parent=parent, depth=depths(parent),
                    top_op=np.empty(0), annotation=np.empty(0), iteration=np.empty(0),
                    threads=threads, node_of_row=node_of_row)
    # 2021-era traces record ProfilerStep#N as a cpu op around everything: a scope, not an op.
    tree.top_op = tree.outermost(is_op & ~is_step)
    tree.annotation = tree.nearest(~is_op & ~is_step)
    tree.iteration = iterations(trace, tree.rank, tree.ts)
    return tree


# -- Python frames ---------------------------------------------------------------------------------
class FrameNest:
    """The Python frames of one thread in start order: `holder` parents by time (for finding the
    innermost frame around an interval) and `parent`, the Python parent id's frame where the
    trace records one (else the holder)."""

    def __init__(self, frames: Frames, idx: np.ndarray):
        idx = idx[start_order(frames["ts"][idx], frames["dur"][idx])]
        self.ts, self.end = frames["ts"][idx], frames["end"][idx]
        self.name = frames["name"][idx]
        self.holder = holder_parents(self.ts, self.end)
        self.parent = self.holder.copy()
        py_id, py_parent = frames["python_id"][idx], frames["python_parent_id"][idx]
        known = np.flatnonzero((py_id >= 0) & (py_parent >= 0))
        if len(known):
            by_id = np.argsort(py_id, kind="stable")
            ids = py_id[by_id]
            j = np.minimum(np.searchsorted(ids, py_parent[known]), len(ids) - 1)
            found = ids[j] == py_parent[known]
            self.parent[known[found]] = by_id[j[found]]

    def enclosing(self, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Innermost frame holding each [ts, end] (-1 if none), by time."""
        cur = np.searchsorted(self.ts, ts, side="right") - 1
        while True:
            short = np.flatnonzero(cur >= 0)
            short = short[self.end[cur[short]] < end[short]]
            if not len(short):
                return cur
            cur[short] = self.holder[cur[short]]


def frame_nest(trace: Trace, key: tuple[int, int, int]) -> FrameNest | None:
    """The frames of one thread (None when it has none), built on first use and cached."""
    cache = trace.cache.setdefault("frame_nests", {})
    if key not in cache:
        f = trace.frames
        idx = np.flatnonzero((f["rank"] == key[0]) & (f["pid"] == key[1]) & (f["tid"] == key[2]))
        cache[key] = FrameNest(f, idx) if len(idx) else None
    return cache[key]


# -- iterations ------------------------------------------------------------------------------------
def profiler_steps(ev: pd.DataFrame) -> pd.DataFrame:
    """Host-side `ProfilerStep#N` events (user annotations; cpu ops in 2021 traces) with `step`."""
    sel = ev.iloc[rows_named(ev, STEP, HOST_CATS)]
    step = np.array([int(str(n)[len("ProfilerStep#"):]) for n in sel["name"]], dtype=np.int64)
    return sel.assign(step=step)


def iterations(trace: Trace, rank: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """N of the ProfilerStep#N on the same rank (any thread) whose interval holds ts, else -1."""
    out = np.full(len(ts), -1, dtype=np.int64)
    steps = trace.cache.get("profiler_steps")
    if steps is None:
        steps = trace.cache["profiler_steps"] = profiler_steps(trace.events)
    s_rank, s_ts, s_end, s_step = (steps[c].to_numpy() for c in ("rank", "ts", "end", "step"))
    for r in np.unique(s_rank):
        own = np.flatnonzero(s_rank == r)
        own = own[np.argsort(s_ts[own], kind="stable")]
        st, se, sn = s_ts[own], s_end[own], s_step[own]
        sel = np.flatnonzero(rank == r)
        j = np.searchsorted(st, ts[sel], side="right") - 1
        ok = (j >= 0) & (ts[sel] <= se[np.maximum(j, 0)])
        out[sel[ok]] = sn[j[ok]]
    return out


# -- interval queries: spans a rule chooses, items that are not host nodes --------------------------
def covered(spans: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
    """Whether each row (rank, pid, tid, ts, end) lies inside one of the spans on its thread:
    a span starting at or before its start and ending at or after its end."""
    out = np.zeros(len(rows), dtype=bool)
    if rows.empty or spans.empty:
        return out
    span_ts, span_end = spans["ts"].to_numpy(), spans["end"].to_numpy()
    groups = thread_groups(spans)
    q_ts, q_end = rows["ts"].to_numpy(), rows["end"].to_numpy()
    for key, pos in thread_groups(rows).items():
        own = groups.get(key)
        if own is None:
            continue
        own = own[np.argsort(span_ts[own], kind="stable")]
        starts, reach = span_ts[own], np.maximum.accumulate(span_end[own])
        j = np.searchsorted(starts, q_ts[pos], side="right") - 1
        ok = j >= 0
        hit = np.zeros(len(pos), dtype=bool)
        hit[ok] = reach[j[ok]] >= q_end[pos][ok]
        out[pos] = hit
    return out


def outermost(items: pd.DataFrame, tie: str) -> np.ndarray:
    """Positions of the items (rank, pid, tid, ts, dur, end) that lie inside no earlier item of
    their thread, in (thread, start) order: longer first, and on identical intervals the lower
    `tie` value is the outer one (`if t:` records `aten::is_nonzero > aten::item`). A sweep over
    the items only (they are few: sync candidates)."""
    if items.empty:
        return np.empty(0, dtype=np.int64)
    order = np.lexsort((items[tie].to_numpy(), -items["dur"].to_numpy(), items["ts"].to_numpy(),
                        items["tid"].to_numpy(), items["pid"].to_numpy(), items["rank"].to_numpy()))
    key = items[["rank", "pid", "tid"]].to_numpy()[order]
    end = items["end"].to_numpy()[order]
    keep = np.ones(len(order), dtype=bool)
    open_key, open_end = None, -np.inf
    for i in range(len(order)):
        k = tuple(key[i])
        if k == open_key and end[i] <= open_end:
            keep[i] = False
        else:
            open_key, open_end = k, end[i]
    return order[keep]


def starts_inside(spans: pd.DataFrame, points: pd.DataFrame) -> np.ndarray:
    """Whether each point's `ts` lies inside one of the spans (`ts`..`end`) on its own
    (rank, pid, tid); the spans of one thread must not overlap (e.g. top-level ops)."""
    out = np.zeros(len(points), dtype=bool)
    if points.empty or spans.empty:
        return out
    span_ts, span_end = spans["ts"].to_numpy(), spans["end"].to_numpy()
    span_groups = thread_groups(spans)
    ts = points["ts"].to_numpy()
    for key, pos in thread_groups(points).items():
        own = span_groups.get(key)
        if own is None:
            continue
        own = own[np.argsort(span_ts[own], kind="stable")]
        starts, ends = span_ts[own], span_end[own]
        j = np.searchsorted(starts, ts[pos], side="right") - 1
        ok = j >= 0
        hit = np.zeros(len(pos), dtype=bool)
        hit[ok] = ends[j[ok]] >= ts[pos][ok]
        out[pos] = hit
    return out


def sums_inside(spans: pd.DataFrame, items: pd.DataFrame, time_col: str,
                values: list[np.ndarray | None], keys: tuple[str, ...] = ("rank", "pid", "tid")
                ) -> list[np.ndarray]:
    """For each span and each of `values` (arrays aligned with items; None counts items), the
    sum over the items whose time_col lies in [ts, end] among items with the same keys. Sorted
    times, prefix sums and searchsorted per key group: no loop over spans or items."""
    out = [np.zeros(len(spans)) for _ in values]
    if spans.empty or items.empty:
        return out
    item_groups = thread_groups(items, keys)
    item_t = items[time_col].to_numpy()
    span_ts, span_end = spans["ts"].to_numpy(), spans["end"].to_numpy()
    for key, pos in thread_groups(spans, keys).items():
        own = item_groups.get(key)
        if own is None:
            continue
        own = own[np.argsort(item_t[own], kind="stable")]
        t = item_t[own]
        lo = np.searchsorted(t, span_ts[pos], side="left")
        hi = np.searchsorted(t, span_end[pos], side="right")
        for result, v in zip(out, values):
            cum = np.concatenate(([0.0], np.cumsum(np.ones(len(t)) if v is None else v[own])))
            result[pos] = cum[hi] - cum[lo]
    return out


def launched_inside(spans: pd.DataFrame, links: pd.DataFrame) -> Iterator[tuple[object, pd.DataFrame]]:
    """For each span (rows with rank, pid, tid, ts, end) that launched GPU work: its label and
    the rows of `links` (a `gpu_launches` selection) whose launch call starts inside it on the
    same thread. Per thread: launches sorted once, two searchsorted calls for all its spans."""
    link_groups = thread_groups(links)
    launch_ts = links["launch_ts"].to_numpy()
    span_ts, span_end, labels = spans["ts"].to_numpy(), spans["end"].to_numpy(), spans.index
    for key, pos in thread_groups(spans).items():
        own = link_groups.get(key)
        if own is None:
            continue
        own = own[np.argsort(launch_ts[own], kind="stable")]
        t = launch_ts[own]
        lo = np.searchsorted(t, span_ts[pos], side="left")
        hi = np.searchsorted(t, span_end[pos], side="right")
        for p, a, b in zip(pos.tolist(), lo.tolist(), hi.tolist()):
            if b > a:
                yield labels[p], links.iloc[own[a:b]]


def between(points: pd.DataFrame, after: pd.DataFrame, before: pd.DataFrame) -> np.ndarray:
    """Whether each point starts after the latest `after` event of its thread has ended, with no
    `before` event started since, and a `before` event still to come on the thread (e.g. a
    read-back between a gradient-norm op and the optimizer step that follows it)."""
    out = np.zeros(len(points), dtype=bool)
    if points.empty or after.empty or before.empty:
        return out
    a_end, b_ts = after["end"].to_numpy(), before["ts"].to_numpy()
    a_groups, b_groups = thread_groups(after), thread_groups(before)
    ts = points["ts"].to_numpy()
    for key, pos in thread_groups(points).items():
        a, b = a_groups.get(key), b_groups.get(key)
        if a is None or b is None:
            continue
        ne, st = np.sort(a_end[a]), np.sort(b_ts[b])
        i = np.searchsorted(ne, ts[pos], side="right") - 1          # last `after` ended by ts
        j = np.searchsorted(st, ts[pos], side="right") - 1          # last `before` started by ts
        last_after = np.where(i >= 0, ne[np.maximum(i, 0)], -np.inf)
        last_before = np.where(j >= 0, st[np.maximum(j, 0)], -np.inf)
        out[pos] = (i >= 0) & (last_after > last_before) & (j + 1 < len(st))
    return out
