"""Why a device idles: each idle gap's time attributed to what the host was doing meanwhile.

Definitions (DESIGN.md, burstiness):
- each idle gap [a, b) of a device is read off **one host thread** of its rank: the thread that
  launched the work that ends the gap (the launch call of the gap's opening activity, the one
  launched first when several start together). That is the thread the GPU was waiting on: it had
  to reach that launch before the device could run again. When the opener's launch is not in the
  trace, or its thread has no host events, the rank's **main thread** stands in: the thread that
  launched most of the device's activities (else the thread with the most host events). Reading
  one thread, not "any thread", keeps a busy side thread (a logger, the autograd engine waiting)
  from hiding what the launching thread did.
- the gap is cut at every start and end of that thread's host events (cpu ops, user annotations)
  and Python frames inside it; each piece goes to the **innermost host event open over it**
  (the deepest op or annotation), `ProfilerStep#N` excluded (it spans everything and says
  nothing). A piece that no op or annotation covers goes to the innermost Python frame over it
  (traces with stacks), else to `(host idle / not traced)`.
- `idle_causes` sums the pieces per cause, largest first: `cause`, `idle_us`, `share` (of the
  device's idle time, the sum of its gaps, so shares add up to 1), and `frame`: the innermost
  Python frame that held most of that cause's idle time (the code inside the annotation or op;
  None without stacks). The top `TOP_CAUSES` are kept and the rest summed into `(other)`.

Vectorised over all devices and threads at once (`device_idle_causes`): each host thread's
event and frame times sorted once (`_cuts`), every gap cut at the times strictly inside it by one
binary search for all gaps (`segment_searchsorted`), one `HostTree.enclosing_in` and one
`FrameForest.enclosing_in` over all pieces, sums by one bincount; no loop over devices, threads,
gaps or events (1,000 GPUs idling over one host thread were 1,000 passes over it).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..trace.model import Trace
from .intervals import segment_searchsorted, tuple_codes
from .tree import STEP, frame_forest, host_tree

UNTRACED = "(host idle / not traced)"
OTHER = "(other)"
TOP_CAUSES = 10
_LAST = np.iinfo(np.int64).max // 4  # sorts after every local code


@dataclass
class DeviceGaps:
    """The gaps of every device, concatenated (device i's rows are `gap_dev == i`, in time
    order), and each device's launches (one row per GPU activity with its launch thread)."""

    rank: np.ndarray  # per device
    total: np.ndarray  # per device: its idle time, the sum of its gaps
    gap_dev: np.ndarray  # per gap
    start: np.ndarray
    end: np.ndarray
    opener_pid: np.ndarray  # the launch thread of the gap's opening activity (-1: unknown)
    opener_tid: np.ndarray
    act_dev: np.ndarray  # per GPU activity
    act_pid: np.ndarray  # its launch thread (-1: launch not in the trace)
    act_tid: np.ndarray


def device_idle_causes(trace: Trace, gaps: DeviceGaps) -> list[list[dict]]:
    """`idle_causes` of every device (module docstring), in device order."""
    n_dev = len(gaps.rank)
    out: list[list[dict]] = [[] for _ in range(n_dev)]
    if not len(gaps.start):
        return out
    tree = host_tree(trace)
    thread = gap_threads(trace, gaps)
    sums: list[dict] = [{} for _ in range(n_dev)]
    for d in np.unique(gaps.gap_dev[thread < 0]).tolist():  # ranks without host events
        sums[d][(UNTRACED, None)] = float(gaps.total[d])
    traced = np.flatnonzero(thread >= 0)
    if len(traced):
        _traced_sums(trace, tree, gaps, thread, traced, sums)
    return [_summarise(sums[d], float(gaps.total[d])) if gaps.total[d] > 0 else []
            for d in range(n_dev)]


def gap_threads(trace: Trace, gaps: DeviceGaps) -> np.ndarray:
    """The host thread (its number in the tree's `spans`) each gap is read from (module
    docstring): the opener's launch thread when it has host events, else the rank's main
    thread; -1 when the rank has no host events."""
    spans = host_tree(trace).spans
    thread = spans.lookup(gaps.rank[gaps.gap_dev], gaps.opener_pid, gaps.opener_tid)
    main = _main_threads(trace, gaps)
    return np.where(thread >= 0, thread, main[gaps.gap_dev])


def _main_threads(trace: Trace, gaps: DeviceGaps) -> np.ndarray:
    """Per device: the launch thread with most of its launches (ties: lowest pid, tid) that has
    host events, else its rank's thread with the most host events (ties: lowest pid, tid)."""
    spans = host_tree(trace).spans
    n_dev = len(gaps.rank)
    main = np.full(n_dev, -1, dtype=np.int64)
    ok = np.flatnonzero(gaps.act_pid >= 0)
    if len(ok):
        d, p, t = gaps.act_dev[ok], gaps.act_pid[ok], gaps.act_tid[ok]
        codes = tuple_codes(d, p, t)
        _, first, counts = np.unique(codes, return_index=True, return_counts=True)
        d, p, t = d[first], p[first], t[first]
        thread = spans.lookup(gaps.rank[d], p, t)
        known = np.flatnonzero(thread >= 0)
        order = known[np.lexsort((t[known], p[known], -counts[known], d[known]))]
        lead = order[np.r_[True, d[order][1:] != d[order][:-1]]] if len(order) else order
        main[d[lead]] = thread[lead]
    todo = np.flatnonzero(main < 0)
    if len(todo) and len(spans):
        size = spans.hi - spans.lo  # threads are in (rank, pid, tid) order: ties go to the first
        by = np.lexsort((np.arange(len(spans)), -size, spans.rank))
        lead = by[np.r_[True, spans.rank[by][1:] != spans.rank[by][:-1]]]
        ranks = spans.rank[lead]
        j = np.minimum(np.searchsorted(ranks, gaps.rank[todo]), len(ranks) - 1)
        hit = ranks[j] == gaps.rank[todo]
        main[todo[hit]] = lead[j[hit]]
    return main


def _traced_sums(trace, tree, gaps: DeviceGaps, thread, traced, sums) -> None:
    """Add the pieces of the gaps read off a host thread into each device's sums, keyed by
    (cause, frame), in the order the thread-by-thread sums had (the figures stay bit-equal)."""
    # gaps by (device, thread), each thread's in time order
    traced = traced[np.lexsort((traced, thread[traced], gaps.gap_dev[traced]))]
    dev, thr = gaps.gap_dev[traced], thread[traced]
    gs, ge = gaps.start[traced], gaps.end[traced]
    cut_vals, cut_lo, cut_hi = _cuts(trace, tree)
    lo = segment_searchsorted(cut_vals, cut_lo[thr], cut_hi[thr], gs, side="right")
    hi = segment_searchsorted(cut_vals, cut_lo[thr], cut_hi[thr], ge, side="left")
    # each gap cut at the thread's times strictly inside it: hi - lo cuts, hi - lo + 1 pieces
    k = hi - lo + 1
    gap_of = np.repeat(np.arange(len(gs)), k)
    j = np.arange(len(gap_of)) - np.repeat(np.cumsum(k) - k, k)
    last = len(cut_vals) - 1
    s = np.where(j == 0, gs[gap_of], cut_vals[np.clip(lo[gap_of] + j - 1, 0, last)])
    e = np.where(j == k[gap_of] - 1, ge[gap_of], cut_vals[np.clip(lo[gap_of] + j, 0, last)])
    p_thread = thr[gap_of]
    node = tree.enclosing_in(p_thread, s, e)
    has_node = node >= 0
    has_node[has_node] = ~_step_names(tree)[tree.name[node[has_node]]]
    n_names = len(tree.names)
    forest = frame_forest(trace) if len(trace.frames) else None
    if forest is not None:
        f = forest.enclosing_in(_forest_threads(tree, forest)[p_thread], s, e)
        # a frame is the detail of a node it lies inside, or the cause where no node is
        inner = (f >= 0) & (~has_node | (forest.ts[np.maximum(f, 0)] >= tree.ts[np.maximum(node, 0)]))
        codes, frame_names = _frame_codes(forest)
        n_frames = len(frame_names)
        frame = np.where(inner, codes[np.maximum(f, 0)], n_frames)
    else:
        inner, frame_names, n_frames = np.zeros(len(s), dtype=bool), np.empty(0, dtype=object), 0
        frame = np.zeros(len(s), dtype=np.int64)
    cause = np.where(has_node, tree.name[np.maximum(node, 0)], n_names + frame)
    # one group per (device, thread): the thread-by-thread sums' unit
    p_dev = dev[gap_of]
    dt = np.cumsum(np.r_[True, (p_dev[1:] != p_dev[:-1]) | (p_thread[1:] != p_thread[:-1])]) - 1
    # each (device, thread)'s frame names numbered by first appearance (pd.factorize's order
    # in the thread-by-thread sums; it decides the order causes are added in)
    local = np.full(len(s), _LAST, dtype=np.int64)
    at = np.flatnonzero(inner)
    if len(at):
        c2 = tuple_codes(dt[at], frame[at])
        _, first2 = np.unique(c2, return_index=True)
        by = np.lexsort((first2, dt[at][first2]))
        group_start = np.r_[True, dt[at][first2][by][1:] != dt[at][first2][by][:-1]]
        rank_in = np.arange(len(by)) - np.maximum.accumulate(np.where(group_start, np.arange(len(by)), 0))
        rank_of = np.empty(len(by), dtype=np.int64)
        rank_of[by] = rank_in
        local[at] = rank_of[c2]
    # level 1: per (device, thread, cause, frame), summed in time order
    c1 = tuple_codes(dt, cause, frame)
    us1 = np.bincount(c1, weights=e - s)
    _, first1 = np.unique(c1, return_index=True)
    d1, cause1, frame1, dt1, local1 = p_dev[first1], cause[first1], frame[first1], dt[first1], local[first1]
    local_cause = np.where(cause1 < n_names, cause1, n_names + local1)
    # level 2: per (device, cause, frame), the threads' sums added in thread order
    c2 = tuple_codes(d1, cause1, frame1)
    us2 = np.bincount(c2, weights=us1)
    _, first = np.unique(c2, return_index=True)
    order = first[np.lexsort((local1[first], local_cause[first], dt1[first], d1[first]))]
    untraced = n_names + n_frames
    for i, us in zip(order.tolist(), us2[c2[order]].tolist()):
        c, fr = int(cause1[i]), int(frame1[i])
        name = (str(tree.names[c]) if c < n_names
                else UNTRACED if c == untraced else str(frame_names[c - n_names]))
        sums[int(d1[i])][(name, str(frame_names[fr]) if fr < n_frames else None)] = us


def _step_names(tree) -> np.ndarray:
    """Which name codes are ProfilerStep#N, once per tree."""
    step = tree.__dict__.get("_step_names")
    if step is None:
        step = tree.__dict__["_step_names"] = pd.Series(tree.names, dtype=object).astype(str) \
            .str.match(STEP.pattern).to_numpy(bool)
    return step


def _cuts(trace: Trace, tree):
    """Every host thread's event starts and ends and its Python frames' starts and ends, sorted
    and distinct within the thread, thread after thread (the tree's `spans` order): values and
    each thread's [lo, hi); once per tree."""
    cached = tree.__dict__.get("_cuts")
    if cached is None:
        spans = tree.spans
        node_thread = np.repeat(np.arange(len(spans)), spans.hi - spans.lo)
        values, owner = [tree.ts, tree.end], [node_thread, node_thread]
        if len(trace.frames):
            forest = frame_forest(trace)
            mine = _forest_threads(tree, forest)  # tree thread -> forest thread
            of_forest = np.full(len(forest.spans), -1, dtype=np.int64)
            of_forest[mine[mine >= 0]] = np.flatnonzero(mine >= 0)
            f_thread = np.repeat(of_forest, forest.spans.hi - forest.spans.lo)
            keep = f_thread >= 0
            values += [forest.ts[keep], forest.end[keep]]
            owner += [f_thread[keep], f_thread[keep]]
        values, owner = np.concatenate(values), np.concatenate(owner)
        by = np.lexsort((values, owner))
        values, owner = values[by], owner[by]
        distinct = np.r_[True, (values[1:] != values[:-1]) | (owner[1:] != owner[:-1])]
        values, owner = values[distinct], owner[distinct]
        bounds = np.searchsorted(owner, np.arange(len(spans) + 1))
        cached = tree.__dict__["_cuts"] = (values, bounds[:-1], bounds[1:])
    return cached


def _forest_threads(tree, forest) -> np.ndarray:
    """Per tree thread, the number of its frames' thread in the forest (-1: no frames)."""
    cached = tree.__dict__.get("_forest_threads")
    if cached is None:
        s = tree.spans
        cached = tree.__dict__["_forest_threads"] = forest.spans.lookup(s.rank, s.pid, s.tid)
    return cached


def _frame_codes(forest) -> tuple[np.ndarray, np.ndarray]:
    """Each frame's name as a code, and the names; once per forest."""
    cached = forest.__dict__.get("_name_codes")
    if cached is None:
        codes, names = pd.factorize(forest.name)
        cached = forest.__dict__["_name_codes"] = (codes.astype(np.int64), np.asarray(names, dtype=object))
    return cached


def _summarise(sums: dict, total: float) -> list[dict]:
    by_cause: dict[str, float] = {}
    best: dict[str, tuple[float, str]] = {}
    for (cause, frame), us in sums.items():
        by_cause[cause] = by_cause.get(cause, 0.0) + us
        if frame is not None and frame != cause and us > best.get(cause, (0.0, ""))[0]:
            best[cause] = (us, frame)
    ranked = sorted(by_cause.items(), key=lambda kv: (-kv[1], kv[0]))
    out = [{"cause": c, "idle_us": us, "share": us / total,
            "frame": best[c][1] if c in best else None} for c, us in ranked]
    if len(out) > TOP_CAUSES:
        rest = sum(o["idle_us"] for o in out[TOP_CAUSES - 1:])
        out = out[:TOP_CAUSES - 1] + [{"cause": OTHER, "idle_us": rest, "share": rest / total,
                                        "frame": None}]
    return out
