"""The launching host thread's timeline cut into stretches, each with the cause idle time in it
goes to (idle.py's definitions, DESIGN.md "burstiness"): the cut times of every host thread (its
events', frames' and runtime calls' starts and ends), the (cause, frame) of each stretch between two
of them, and the runtime/driver calls of a known kind that take a stretch as their own.
The cut times and runtime calls are computed once per host tree and kept on it.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...trace.model import Trace, in_categories
from .compiled import graph_owner
from ..intervals import segment_searchsorted, tuple_codes
from ..host.links import LAUNCH_CATS
from ..tree import STEP, frame_forest

# Runtime/driver calls that hold the host, by kind (first match wins; module docstring).
RUNTIME_KINDS = (
    ("module", re.compile(r"^(?:cu|hip)(?:ModuleLoad|LibraryLoad)")),
    ("context", re.compile(r"^(?:cuInit|cuCtxCreate|cuDevicePrimaryCtxRetain|hipInit|hipCtxCreate)")),
    ("alloc", re.compile(r"^(?:cuda|hip)(?:Malloc|HostAlloc|ExtMalloc)|^cuMem(?:Alloc|Create|HostAlloc)")),
    ("free", re.compile(r"^(?:cuda|hip)(?:Free|HostFree)|^cuMem(?:Free|Release|HostFree)")),
    ("sync", re.compile(r"Synchronize|^(?:cuda|hip)Memcpy(?:2D|3D|Peer|ToSymbol|FromSymbol|DtoH|HtoD|DtoD)?$"
                        r"|^hipMemcpyWithStream$|^cuMemcpy(?:DtoH|HtoD|DtoD)?(?:_v2)?$")),
    ("launch", re.compile(r"Launch(?:Cooperative)?Kernel")),
)
KINDS = tuple(k for k, _ in RUNTIME_KINDS)
LONG_LAUNCH_US = 1000.0  # a launch this long loaded code (first launch) or waited on a full queue


def piece_keys(trace, tree, thread, s, e) -> tuple[np.ndarray, np.ndarray]:
    """(cause, frame) codes of pieces [s, e] read off tree threads: cause a tree name code (the
    innermost op or annotation, ProfilerStep#N excluded), else n_names + a frame name code (the
    innermost frame), else n_names + n_frame_names (untraced); frame a frame name code (the
    innermost frame, where it lies inside the cause's node or there is none) or n_frame_names."""
    node = tree.enclosing_in(thread, s, e)
    outer = graph_owner(tree)[np.maximum(node, 0)]  # inside a compiled graph: the graph
    node = np.where((node >= 0) & (outer >= 0), outer, node)
    has_node = node >= 0
    has_node[has_node] = ~step_names(tree)[tree.name[node[has_node]]]
    n_names = len(tree.names)
    if len(trace.frames):
        forest = frame_forest(trace)
        f = forest.enclosing_in(forest_threads(tree, forest)[thread], s, e)
        # a frame is the detail of a node it lies inside, or the cause where no node is
        inner = (f >= 0) & (~has_node | (forest.ts[np.maximum(f, 0)] >= tree.ts[np.maximum(node, 0)]))
        codes, frame_names = frame_codes(forest)
        n_frame_names = len(frame_names)
        frame = np.where(inner, codes[np.maximum(f, 0)], n_frame_names)
    else:
        n_frame_names = 0
        frame = np.zeros(len(s), dtype=np.int64)
    cause = np.where(has_node, tree.name[np.maximum(node, 0)], n_names + frame)
    rt_ts, rt_end, rt_code, rt_kind, rt_lo, rt_hi = runtime_calls(trace, tree)
    if len(rt_ts) and len(s):
        # inside a runtime call (its ends are cut times: a piece is inside one or outside all):
        # the call, with the cause found so far as its context
        lo, hi = rt_lo[thread], rt_hi[thread]
        j = segment_searchsorted(rt_ts, lo, hi, s, side="right") - 1
        k = np.maximum(j, 0)
        inside = (j >= lo) & (rt_end[k] >= e)
        n_ctx = n_names + n_frame_names + 1  # the causes found so far: names, frames, untraced
        cause = np.where(inside, n_ctx + (rt_code[k] * len(KINDS) + rt_kind[k]) * n_ctx + cause, cause)
    return cause, frame


def runtime_calls(trace, tree):
    """The runtime/driver calls of a known kind (module docstring) on the tree's threads,
    outermost only, thread after thread in start order: starts, ends, name codes (the tree's
    names), kind numbers (KINDS) and each thread's [lo, hi); once per tree."""
    cached = tree.__dict__.get("_runtime_calls")
    if cached is None:
        ev = trace.events
        rows = np.flatnonzero(in_categories(ev["cat"], LAUNCH_CATS))
        names = pd.Series(tree.names, dtype=object).astype(str)
        kind_of = np.full(len(names) + 1, -1, dtype=np.int64)  # [-1]: no name
        for k in range(len(RUNTIME_KINDS) - 1, -1, -1):  # the first match wins
            kind_of[:-1][names.str.contains(RUNTIME_KINDS[k][1].pattern, regex=True).to_numpy(bool)] = k
        code = ev["name"].cat.codes.to_numpy()[rows].astype(np.int64)
        kind = kind_of[code]
        col = {c: ev[c].to_numpy()[rows] for c in ("rank", "pid", "tid", "ts", "end")}
        ts, end = col["ts"].astype(float), col["end"].astype(float)
        launch = kind == KINDS.index("launch")
        if len(rows):  # a free before any launch of its process creates the context (cudaFree(0))
            proc = tuple_codes(col["rank"], col["pid"])
            first = np.full(int(proc.max()) + 1, np.inf)
            np.minimum.at(first, proc[launch], ts[launch])
            kind[(kind == KINDS.index("free")) & (ts < first[proc])] = KINDS.index("context")
        keep = (kind >= 0) & (~launch | (end - ts >= LONG_LAUNCH_US))
        thread = tree.spans.lookup(col["rank"], col["pid"], col["tid"])
        keep = np.flatnonzero(keep & (thread >= 0))
        by = keep[np.lexsort((ts[keep] - end[keep], ts[keep], thread[keep]))]
        thread, ts, end, code, kind = thread[by], ts[by], end[by], code[by], kind[by]
        if len(by):  # drop calls inside an earlier one of their thread (ends coded per thread)
            end_code = tuple_codes(thread, end)
            before = np.r_[-1, np.maximum.accumulate(end_code)[:-1]]
            outer = before < end_code
            thread, ts, end, code, kind = thread[outer], ts[outer], end[outer], code[outer], kind[outer]
        bounds = np.searchsorted(thread, np.arange(len(tree.spans) + 1))
        cached = tree.__dict__["_runtime_calls"] = (ts, end, code, kind, bounds[:-1], bounds[1:])
    return cached


def segments(trace, tree, at: "np.ndarray | None" = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per cut time (`cuts`; only those numbered in `at`, else every one), the (cause, frame)
    codes and length of the stretch up to the next cut time of the same thread (meaningless at a
    thread's last). Idle causes ask only for the stretches inside a gap: on the 586 MB benchmark
    trace about one in ten."""
    values, lo, hi = cuts(trace, tree)
    at = np.arange(len(values)) if at is None else np.asarray(at, dtype=np.int64)
    if not len(at) or len(values) < 2:
        return np.zeros(len(at), dtype=np.int64), np.zeros(len(at), dtype=np.int64), np.zeros(len(at))
    owner = np.searchsorted(hi, at, side="right")  # the thread of each cut: lo[t] <= at < hi[t]
    nxt = np.minimum(at + 1, len(values) - 1)
    last = nxt >= hi[owner]  # a thread's last cut: an empty stretch
    s, e = values[at], np.where(last, values[at], values[nxt])
    cause, frame = piece_keys(trace, tree, owner, s, e)
    length = e - s
    return np.where(last, 0, cause), np.where(last, 0, frame), np.where(last, 0.0, length)


def step_names(tree) -> np.ndarray:
    """Which name codes are ProfilerStep#N, once per tree."""
    return tree.names_matching(STEP)


def cuts(trace: Trace, tree):
    """Every host thread's event starts and ends and its Python frames' starts and ends, sorted
    and distinct within the thread, thread after thread (the tree's `spans` order): values and
    each thread's [lo, hi); once per tree."""
    cached = tree.__dict__.get("cuts")
    if cached is None:
        spans = tree.spans
        node_thread = np.repeat(np.arange(len(spans)), spans.hi - spans.lo)
        values, owner = [tree.ts, tree.end], [node_thread, node_thread]
        if len(trace.frames):
            forest = frame_forest(trace)
            mine = forest_threads(tree, forest)  # tree thread -> forest thread
            of_forest = np.full(len(forest.spans), -1, dtype=np.int64)
            of_forest[mine[mine >= 0]] = np.flatnonzero(mine >= 0)
            f_thread = np.repeat(of_forest, forest.spans.hi - forest.spans.lo)
            keep = f_thread >= 0
            values += [forest.ts[keep], forest.end[keep]]
            owner += [f_thread[keep], f_thread[keep]]
        rt_ts, rt_end, _, _, rt_lo, rt_hi = runtime_calls(trace, tree)
        rt_thread = np.repeat(np.arange(len(spans)), rt_hi - rt_lo)
        values += [rt_ts, rt_end]
        owner += [rt_thread, rt_thread]
        values, owner = np.concatenate(values), np.concatenate(owner)
        by = np.lexsort((values, owner))
        values, owner = values[by], owner[by]
        distinct = np.r_[True, (values[1:] != values[:-1]) | (owner[1:] != owner[:-1])]
        values, owner = values[distinct], owner[distinct]
        bounds = np.searchsorted(owner, np.arange(len(spans) + 1))
        cached = tree.__dict__["cuts"] = (values, bounds[:-1], bounds[1:])
    return cached


def forest_threads(tree, forest) -> np.ndarray:
    """Per tree thread, the number of its frames' thread in the forest (-1: no frames)."""
    cached = tree.__dict__.get("forest_threads")
    if cached is None:
        s = tree.spans
        cached = tree.__dict__["forest_threads"] = forest.spans.lookup(s.rank, s.pid, s.tid)
    return cached


def frame_codes(forest) -> tuple[np.ndarray, np.ndarray]:
    """Each frame's name as a code, and the names; once per forest."""
    cached = forest.__dict__.get("_name_codes")
    if cached is None:
        codes, names = pd.factorize(forest.name)
        cached = forest.__dict__["_name_codes"] = (codes.astype(np.int64), np.asarray(names, dtype=object))
    return cached
