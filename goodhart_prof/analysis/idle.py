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

Vectorised: per thread one sorted cut of the gaps, one `HostTree.enclosing` and one
`FrameNest.enclosing` over all pieces; no loop over gaps or events.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.model import Trace
from .tree import STEP, frame_nest, host_tree

UNTRACED = "(host idle / not traced)"
OTHER = "(other)"
TOP_CAUSES = 10


def gap_threads(rank: int, opener_pid: np.ndarray, opener_tid: np.ndarray, device_pid: np.ndarray,
                device_tid: np.ndarray, trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The host thread each gap is read from (module docstring): the opener's launch thread when it
    has host events, else the rank's main thread. pid/tid -1: the rank has no host events."""
    tree = host_tree(trace)
    known = _rank_threads(tree).get(rank, {})
    main = _main_thread(rank, device_pid, device_tid, tree, known)
    pid, tid = opener_pid.astype(np.int64).copy(), opener_tid.astype(np.int64).copy()
    ok = _is_known(pid, tid, known)
    pid[~ok], tid[~ok] = main
    return pid, tid


def _rank_threads(tree) -> dict[int, dict[tuple[int, int], None]]:
    """rank -> its host threads (pid, tid) in tree order, once per tree (a pass over every
    thread per device was quadratic: 20,000 ranks of 2 threads, 400 million steps)."""
    cached = tree.__dict__.get("_rank_threads")
    if cached is None:
        cached = tree.__dict__["_rank_threads"] = {}
        for r, p, t in tree.threads:
            cached.setdefault(r, {})[(p, t)] = None
    return cached


def _is_known(pid: np.ndarray, tid: np.ndarray, known: dict) -> np.ndarray:
    """Whether each (pid, tid) is one of `known`: pairs as one integer key each, one isin."""
    if not known or not len(pid):
        return np.zeros(len(pid), dtype=bool)
    k_pid, k_tid = (np.fromiter((k[i] for k in known), np.int64, len(known)) for i in (0, 1))
    pids, pid_code = np.unique(np.concatenate((k_pid, pid)), return_inverse=True)
    tids, tid_code = np.unique(np.concatenate((k_tid, tid)), return_inverse=True)
    key = pid_code.ravel() * len(tids) + tid_code.ravel()
    return np.isin(key[len(known):], key[:len(known)])


def _main_thread(rank, device_pid, device_tid, tree, known) -> tuple[int, int]:
    if not known:
        return -1, -1
    ok = device_pid >= 0
    if ok.any():  # launch threads, most launches first (ties: lowest pid, tid)
        # Each (pid, tid) as one int: codes of pid and tid, combined (10x faster than
        # np.unique over rows); sorted codes keep the (pid, tid) order for the ties.
        pids, pid_code = np.unique(device_pid[ok], return_inverse=True)
        tids, tid_code = np.unique(device_tid[ok], return_inverse=True)
        pairs, counts = np.unique(pid_code * len(tids) + tid_code, return_counts=True)
        for i in np.argsort(-counts, kind="stable").tolist():
            key = (int(pids[pairs[i] // len(tids)]), int(tids[pairs[i] % len(tids)]))
            if key in known:
                return key
    sizes = {(p, t): tree.threads[(rank, p, t)][1] - tree.threads[(rank, p, t)][0] for p, t in known}
    return max(sorted(sizes), key=lambda k: sizes[k])


def idle_causes(trace: Trace, rank: int, gap_start: np.ndarray, gap_end: np.ndarray,
                pid: np.ndarray, tid: np.ndarray) -> list[dict]:
    """`idle_causes` of one device (module docstring) from its gaps and the thread of each."""
    total = float(np.sum(gap_end - gap_start))
    if total <= 0:
        return []
    tree = host_tree(trace)
    step = tree.__dict__.get("_step_names")
    if step is None:  # which name codes are ProfilerStep#N, once per tree
        step = tree.__dict__["_step_names"] = pd.Series(tree.names, dtype=object).astype(str) \
            .str.match(STEP.pattern).to_numpy(bool)
    sums: dict[tuple[str, str | None], float] = {}
    # the gaps of each thread: one lexsort (a mask per thread was quadratic when every gap is
    # read off another thread)
    order = np.lexsort((tid, pid))
    p_sorted, t_sorted = pid[order], tid[order]
    change = np.flatnonzero((p_sorted[1:] != p_sorted[:-1]) | (t_sorted[1:] != t_sorted[:-1])) + 1
    bounds = np.concatenate(([0], change, [len(order)]))
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        sel = np.sort(order[a:b])  # the thread's gaps in time order, as before
        key = (int(p_sorted[a]), int(t_sorted[a]))
        for k, us in _thread_pieces(trace, tree, step, (rank, *key), gap_start[sel], gap_end[sel]):
            sums[k] = sums.get(k, 0.0) + us
    return _summarise(sums, total)


def _thread_pieces(trace, tree, step, key, gs: np.ndarray, ge: np.ndarray):
    """((cause, frame or None), idle us) summed over the pieces of this thread's gaps."""
    span = tree.threads.get(key)
    if span is None:  # no host events on the rank at all
        return [((UNTRACED, None), float(np.sum(ge - gs)))]
    nest = frame_nest(trace, key)
    # Every run sorted once per thread (starts are; ends in start order nearly are: timsort) and
    # kept (a device per GPU would sort the same thread again for each), then the values inside
    # a gap picked per gap with two sorted searches, and all runs merged by one more stable
    # sort: no search per value.
    inside = [_within(run, gs, ge) for run in _sorted_runs(tree, key, nest)]
    cuts = np.sort(np.concatenate(inside + [gs, ge]), kind="stable")
    cuts = cuts[np.concatenate(([True], cuts[1:] != cuts[:-1]))]
    s, e = cuts[:-1], cuts[1:]
    # A piece that starts at a gap's end lies between gaps, unless the next gap starts right
    # there (a zero-length busy block between two gaps).
    follows = np.searchsorted(gs, ge)
    ends = ge[~((follows < len(gs)) & (gs[np.minimum(follows, len(gs) - 1)] == ge))]
    keep = np.ones(len(s), dtype=bool)
    at_end = np.searchsorted(cuts, ends)
    keep[at_end[at_end < len(s)]] = False
    s, e = s[keep], e[keep]
    n = len(s)
    node = tree.enclosing_on(key, s, e)
    has_node = node >= 0
    has_node[has_node] = ~step[tree.name[node[has_node]]]
    # cause code: a name code of the tree (a node), n_names + frame name code (a frame alone),
    # or n_names + n_frame_names (nothing); frame code: frame name code, or n_frame_names (none)
    n_names = len(tree.names)
    frame_names = np.empty(0, dtype=object)
    frame_code = np.zeros(n, dtype=np.int64)
    if nest is not None:
        f = nest.enclosing(s, e)
        # a frame is the detail of a node it lies inside, or the cause where no node is
        inner = (f >= 0) & (~has_node | (nest.ts[np.maximum(f, 0)] >= tree.ts[np.maximum(node, 0)]))
        codes, frame_names = pd.factorize(nest.name[f[inner]])
        frame_code[inner] = codes
        frame_code[~inner] = len(frame_names)
    else:
        inner = np.zeros(n, dtype=bool)
    none = len(frame_names)
    cause = np.where(has_node, tree.name[np.maximum(node, 0)],
                     n_names + np.where(inner, frame_code, none))
    combined = cause * (none + 1) + frame_code
    if combined.max(initial=0) < 4 * len(combined) + 1024:  # small codes: count directly
        us = np.bincount(combined, weights=e - s)
        keys = np.flatnonzero(us)
        us = us[keys]
    else:
        keys, inverse = np.unique(combined, return_inverse=True)
        us = np.bincount(inverse.ravel(), weights=e - s, minlength=len(keys))
    out = []
    for k, t in zip(keys.tolist(), us.tolist()):
        c, fr = divmod(k, none + 1)
        name = (str(tree.names[c]) if c < n_names
                else UNTRACED if c - n_names == none else str(frame_names[c - n_names]))
        out.append(((name, str(frame_names[fr]) if fr < none else None), t))
    return out


def _sorted_runs(tree, key, nest) -> list[np.ndarray]:
    """The thread's host event starts and ends and its frames' starts and ends, each sorted;
    once per thread and tree."""
    cache = tree.__dict__.setdefault("_sorted_runs", {})
    runs = cache.get(key)
    if runs is None:
        lo, hi = tree.threads[key]
        runs = [tree.ts[lo:hi], tree.end[lo:hi]] + ([nest.ts, nest.end] if nest is not None else [])
        runs = cache[key] = [np.sort(run, kind="stable") for run in runs]
    return runs


def _within(sorted_values: np.ndarray, gs: np.ndarray, ge: np.ndarray) -> np.ndarray:
    """The values lying in some [gs, ge) (values and gaps sorted, gaps disjoint): each gap's
    range found by two searches, the ranges marked with one cumulative sum."""
    lo = np.searchsorted(sorted_values, gs, side="left")
    hi = np.searchsorted(sorted_values, ge, side="left")
    n = len(sorted_values)
    mark = np.bincount(lo, minlength=n + 1)[:n + 1] - np.bincount(hi, minlength=n + 1)[:n + 1]
    return sorted_values[np.cumsum(mark)[:n] > 0]


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
