"""The host call tree of a trace and the Python-frame trees of its threads (columns: the package
docstring)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from ...trace.model import Frames, Trace, name_codes, rows_named
from ..intervals import first_positions, segment_searchsorted, stable_order, thread_groups, tuple_codes
from .parents import climb, parents_depths_ranks, start_order
from .threads import ThreadSpans
from ..memo import derived

# A step number of 19 digits or more may not fit the int64 `iteration` columns: such a
# `ProfilerStep#N` is an ordinary annotation (docs/DESIGN.md, "Times that fit a trace").
STEP = re.compile(r"^ProfilerStep#0*(\d{1,18})$")
HOST_CATS = ("cpu_op", "user_annotation")


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
    is_step: np.ndarray  # ProfilerStep#N (an annotation, or a cpu op in 2021-era traces)
    parent: np.ndarray
    depth: np.ndarray
    end_rank: np.ndarray  # the end's dense rank among its thread's ends (compares ends within a thread)
    threads: dict[tuple[int, int, int], tuple[int, int]]  # thread -> (first, last + 1) in tree order
    node_of_row: np.ndarray = field(repr=False)  # row label -> node (-1: not a host node)
    dur: np.ndarray = field(repr=False)  # durations as recorded (end - ts loses a few 1e-4 us at epoch-scale stamps)

    # Columns derived from the parents, each computed on first use.
    @cached_property
    def top_op(self) -> np.ndarray:
        """The outermost cpu op among each node's ancestors and itself (-1: none). 2021-era
        traces record ProfilerStep#N as a cpu op around everything: a scope, not an op."""
        return self.outermost(self.is_op & ~self.is_step)

    @cached_property
    def annotation(self) -> np.ndarray:
        """The innermost user annotation among each node's ancestors, ProfilerStep#N excluded."""
        return self.nearest(~self.is_op & ~self.is_step)

    @cached_property
    def op_parent(self) -> np.ndarray:
        """The nearest cpu op among each node's ancestors (-1: none); ProfilerStep#N is no op."""
        return self.nearest(self.is_op & ~self.is_step)

    @cached_property
    def self_us(self) -> np.ndarray:
        """Self time of each cpu op node: its duration less the union of the intervals of the
        ops directly under it (its `op_parent` children; an annotation between them is the
        op's own time). NaN for nodes that are not ops (annotations, ProfilerStep#N)."""
        ops = self.is_op & ~self.is_step
        out = np.where(ops, self.dur, np.nan)
        child = np.flatnonzero(ops & (self.op_parent >= 0))
        if len(child):
            par = self.op_parent[child]
            order = np.lexsort((self.ts[child], par))  # by parent, then start
            child, par = child[order], par[order]
            ts, end = self.ts[child], self.end[child]
            # union of each parent's children: clip each start to the reach of the ones before
            # each parent's running maximum of ends: ends coded in (parent, end) order never
            # reach across parents (the codes of a later parent are all larger); NaN: pandas
            code = tuple_codes(par, end)
            value = np.empty(int(code.max()) + 1)
            value[code] = end
            reach = (value[np.maximum.accumulate(code)] if not np.isnan(end).any()
                     else pd.Series(end).groupby(par).cummax().to_numpy())
            before = np.r_[-np.inf, reach[:-1]]
            before[np.r_[True, par[1:] != par[:-1]]] = -np.inf  # a parent's first child
            covered = np.where(ts >= before, self.dur[child], np.maximum(0.0, end - before))
            np.subtract.at(out, par, covered)
        return out

    def __len__(self) -> int:
        return len(self.row)

    def nodes(self, rows: np.ndarray) -> np.ndarray:
        """Node of each trace.events row label (-1: not a cpu op or annotation)."""
        rows = np.asarray(rows, dtype=np.int64)
        ok = (rows >= 0) & (rows < len(self.node_of_row))
        out = np.full(len(rows), -1, dtype=np.int64)
        out[ok] = self.node_of_row[rows[ok]]
        return out

    @cached_property
    def texts(self) -> list[str]:
        """Each name code's name as text."""
        return [str(n) for n in self.names]

    @cached_property
    def spans(self) -> ThreadSpans:
        """The threads numbered in tree order (tree/threads.py), for queries on many threads."""
        return ThreadSpans(self.threads)

    def enclosing(self, rank, pid, tid, ts, end) -> np.ndarray:
        """Innermost node holding each [ts, end] on its thread (-1: none): the latest node that
        starts at or before ts and ends at or after end. From the latest node starting by ts,
        climb parents until one reaches end (a parent is the latest earlier node reaching
        further, so the first found is the latest). All threads in one search, no loop."""
        return self.enclosing_in(self.spans.lookup(rank, pid, tid), ts, end)

    def enclosing_in(self, thread: np.ndarray, ts, end) -> np.ndarray:
        """`enclosing` for intervals given by thread number (`spans`; -1: no thread)."""
        start = self.spans.latest_starting(self.ts, np.asarray(thread, dtype=np.int64), ts)
        return climb(start, np.asarray(end, dtype=float), self.end, self.parent)

    def climb_to(self, nodes: np.ndarray, wanted: np.ndarray) -> np.ndarray:
        """Each of `nodes` where `wanted` (a mask over the nodes) holds, else its nearest
        ancestor where it does (-1: none, or node -1): the nearest enclosing X of a few nodes.
        Climbs only from the nodes not yet wanted, a level a step (usually a step or two;
        `nearest` answers for every node at once)."""
        out = np.asarray(nodes, dtype=np.int64).copy()
        if not len(self.parent):
            return np.full(len(out), -1, dtype=np.int64)
        up = (out >= 0) & ~wanted[np.maximum(out, 0)]
        while up.any():
            out[up] = self.parent[out[up]]
            up = (out >= 0) & ~wanted[np.maximum(out, 0)]
        return out

    def nearest(self, mask: np.ndarray) -> np.ndarray:
        """For each node, the nearest ancestor where mask is true (-1: none). One pass per depth
        level, parents first (`climb_to`: for a few nodes, themselves included)."""
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
        cache = self.__dict__.setdefault("_chains", {}).setdefault(skip, {})
        todo = []
        while node >= 0 and node not in cache:
            todo.append(node)
            node = int(self.parent[node])
        chain = cache[node] if node >= 0 else ()
        if not todo:
            return chain
        names, skipped = self._chain_names(skip)
        for p in reversed(todo):
            code = self.name[p]
            if not skipped[code]:
                chain = chain + (names[code],)
            cache[p] = chain
        return chain

    def chains(self, nodes: np.ndarray, skip: "re.Pattern[str] | None" = STEP) -> list[tuple[str, ...]]:
        """`chain` of each node (-1: the empty chain), for many nodes at once: their ancestors'
        name codes climbed level by level in numpy, each distinct chain's names looked up once
        (the ops of a collective, a logging call: thousands of nodes, a few chains)."""
        nodes = np.asarray(nodes, dtype=np.int64)
        if not len(nodes):
            return []
        names, skipped = self._chain_names(skip)
        skip_code = np.asarray(skipped, dtype=bool)
        levels, at = [], nodes
        while (at >= 0).any():
            code = np.where(at >= 0, self.name[np.maximum(at, 0)], -1)
            code[(code >= 0) & skip_code[np.maximum(code, 0)]] = -1
            levels.append(code)
            at = np.where(at >= 0, self.parent[np.maximum(at, 0)], -1)
        if not levels:
            return [()] * len(nodes)
        inverse = tuple_codes(*levels)  # equal chains, equal codes
        rows = np.stack(levels[::-1], axis=1)[first_positions(inverse)].tolist()  # outermost first
        found = [tuple(names[c] for c in row if c >= 0) for row in rows]
        return [found[i] for i in inverse.tolist()]

    def names_matching(self, pattern: "re.Pattern[str]") -> np.ndarray:
        """Per name code: whether `pattern` matches the name at its start; once per pattern."""
        per = self.__dict__.setdefault("_names_matching", {})
        if pattern not in per:
            per[pattern] = pd.Series(self.names, dtype=object).astype(str).str.match(
                pattern.pattern, flags=pattern.flags & re.IGNORECASE).to_numpy(bool)
        return per[pattern]

    def _chain_names(self, skip: "re.Pattern[str] | None") -> tuple[list[str], list[bool]]:
        """Each name code's text and whether `skip` matches it, found once per pattern."""
        per = self.__dict__.setdefault("_chain_names_by", {})
        if skip not in per:
            names = self.texts
            per[skip] = (names, [skip is not None and bool(skip.match(n)) for n in names])
        return per[skip]

    def _levels(self) -> list[np.ndarray]:
        cached = self.__dict__.get("_by_level")
        if cached is None:
            order = stable_order(self.depth)
            bounds = np.searchsorted(self.depth[order], np.arange(int(self.depth.max(initial=0)) + 2))
            cached = self.__dict__["_by_level"] = [order[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        return cached


def host_tree(trace: Trace) -> HostTree:
    """The host call tree of the trace, built once per trace (memo.py)."""
    return derived(trace, "host_tree", _build)


def _build(trace: Trace) -> HostTree:
    ev = trace.events
    cat_codes = ev["cat"].cat.codes.to_numpy()  # compared as small ints, not strings
    cats = ev["cat"].cat.categories
    op_code = cats.get_loc("cpu_op") if "cpu_op" in cats else -2
    ann_code = cats.get_loc("user_annotation") if "user_annotation" in cats else -2
    is_op_all = cat_codes == op_code
    sel = np.flatnonzero(is_op_all | (cat_codes == ann_code))
    col = {c: ev[c].to_numpy()[sel] for c in ("rank", "pid", "tid", "ts", "dur", "end")}
    groups = thread_groups(pd.DataFrame({c: col[c] for c in ("rank", "pid", "tid")}))
    if len(groups) > MANY_THREADS:
        order, parent, depth, threads, end_rank = _all_threads(groups, col)
    else:
        order, parent, depth, threads, end_rank = _each_thread(groups, col)
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
                    is_op=is_op, is_annotation=~is_op, is_step=is_step, parent=parent, depth=depth,
                    end_rank=end_rank, threads=threads, node_of_row=node_of_row,
                    dur=col["dur"][order].astype(float))
    return tree


# Above this many threads the parents are found for all threads at once (_all_threads): a
# thread's dozen numpy calls cost ~0.1 ms, 10 s over 100,000 threads.
MANY_THREADS = 256


def _each_thread(groups: dict, col: dict):
    """Tree order, parents and depths, one thread at a time (a handful of threads)."""
    parts, threads, at = [], {}, 0
    parents, levels, ranks = [], [], []
    for key, pos in groups.items():  # threads: a handful; numpy inside
        pos = pos[start_order(col["ts"][pos], col["dur"][pos])]
        parent, depth, rank = parents_depths_ranks(col["ts"][pos], col["end"][pos])
        parents.append(np.where(parent >= 0, parent + at, -1))
        levels.append(depth)
        ranks.append(rank)
        parts.append(pos)
        threads[key] = (at, at + len(pos))
        at += len(pos)
    order = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    parent = np.concatenate(parents) if parents else np.empty(0, dtype=np.int64)
    depth = np.concatenate(levels) if levels else np.empty(0, dtype=np.int64)
    end_rank = np.concatenate(ranks) if ranks else np.empty(0, dtype=np.int64)
    return order, parent, depth, threads, end_rank


def _all_threads(groups: dict, col: dict):
    """What _each_thread finds, for all threads in one pass: parents_and_depths only compares
    times within a thread, so each thread's starts and ends become dense integer codes, every
    code of a thread above every code of the threads before it (one lexsort of the times by
    (thread, time)). No event then holds one of another thread (it ends before they start)."""
    keys = list(groups)
    sizes = np.fromiter((len(groups[k]) for k in keys), np.int64, len(keys))
    pos = np.concatenate([groups[k] for k in keys])
    thread = np.repeat(np.arange(len(keys)), sizes)
    # start order per thread (start, longer first on ties; stable): start_order's result
    pos = pos[start_order(col["ts"][pos], col["dur"][pos], thread)]
    n = len(pos)
    values = np.concatenate((col["ts"][pos], col["end"][pos]))
    owner = np.concatenate((thread, thread))
    by = np.lexsort((values, owner))
    new = np.ones(2 * n, dtype=bool)
    new[1:] = (values[by][1:] != values[by][:-1]) | (owner[by][1:] != owner[by][:-1])
    code = np.empty(2 * n, dtype=np.int64)
    code[by] = np.cumsum(new) - 1
    parent, depth, end_rank = parents_depths_ranks(code[:n], code[n:])
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    threads = {k: (int(a), int(b)) for k, a, b in zip(keys, bounds[:-1], bounds[1:])}
    return pos, parent, depth, threads, end_rank


# -- Python frames ---------------------------------------------------------------------------------
class FrameForest:
    """The Python frames of every thread, thread after thread ((rank, pid, tid) order, `spans`),
    each thread's in start order (longer first on ties): `holder`, the parent by time (the latest
    earlier frame of the thread reaching as far; for the innermost frame around an interval), and
    `parent`, the frame of the Python parent id within the thread where the trace records one
    (else the holder). Built for all threads in one pass, as the host tree is past MANY_THREADS."""

    def __init__(self, frames: Frames, groups: dict[tuple[int, int, int], np.ndarray]):
        col = {c: frames[c] for c in ("ts", "dur", "end")}
        order, holder, _, threads, _ = _all_threads(groups, col) if groups else (
            np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), None, {}, None)
        self.spans = ThreadSpans(threads)
        self.ts, self.end = frames["ts"][order], frames["end"][order]
        self.name = frames["name"][order]
        self.holder = holder
        self.parent = holder.copy()
        py_id, py_parent = frames["python_id"][order], frames["python_parent_id"][order]
        known = np.flatnonzero((py_id >= 0) & (py_parent >= 0))
        if len(known):
            thread = np.repeat(np.arange(len(self.spans)), self.spans.hi - self.spans.lo)
            # within each thread by id (ties: start order); ids usually rise with the starts
            if ((np.diff(py_id) >= 0) | (np.diff(thread) > 0)).all():
                by_id = np.arange(len(py_id))
            else:
                by_id = np.lexsort((py_id, thread))
            ids = py_id[by_id]
            lo, hi = self.spans.lo[thread[known]], self.spans.hi[thread[known]]
            j = np.minimum(segment_searchsorted(ids, lo, hi, py_parent[known]), hi - 1)
            found = ids[j] == py_parent[known]
            self.parent[known[found]] = by_id[j[found]]

    def enclosing(self, rank, pid, tid, ts, end) -> np.ndarray:
        """Innermost frame holding each [ts, end] on its thread (-1 if none), by time."""
        return self.enclosing_in(self.spans.lookup(rank, pid, tid), ts, end)

    def enclosing_in(self, thread: np.ndarray, ts, end) -> np.ndarray:
        """`enclosing` for intervals given by thread number (`spans`; -1: no frames)."""
        start = self.spans.latest_starting(self.ts, np.asarray(thread, dtype=np.int64), ts)
        return climb(start, np.asarray(end, dtype=float), self.end, self.holder)


def frame_forest(trace: Trace) -> FrameForest:
    """The Python frames of all threads (FrameForest), built on first use and cached."""
    return derived(trace, "frame_forest", lambda t: FrameForest(t.frames, frame_threads(t)))


def frame_threads(trace: Trace) -> dict[tuple[int, int, int], np.ndarray]:
    """Positions of each thread's frames in trace.frames (ascending), grouped once per trace (a
    pass over all frames per thread was quadratic: 100,000 threads)."""
    def build(t: Trace) -> dict:
        f = t.frames
        return thread_groups(pd.DataFrame({c: f[c] for c in ("rank", "pid", "tid")})) if len(f) else {}
    return derived(trace, "frame_threads", build)


# -- iterations ------------------------------------------------------------------------------------
def profiler_steps(ev: pd.DataFrame) -> pd.DataFrame:
    """Host-side `ProfilerStep#N` events (user annotations; cpu ops in 2021 traces) with `step`."""
    sel = ev.iloc[rows_named(ev, STEP, HOST_CATS)]
    step = np.array([int(str(n)[len("ProfilerStep#"):]) for n in sel["name"]], dtype=np.int64)
    return sel.assign(step=step)
