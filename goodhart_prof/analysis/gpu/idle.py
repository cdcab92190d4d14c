"""Why a device idles: each idle gap's time attributed to what the host was doing meanwhile.

Definitions (DESIGN.md, burstiness):
- the idle time attributed: the gaps between busy stretches, and where the rank has steps, the
  idle inside them before the device's first activity and after its last (`step_edges`).
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
- a piece inside a **runtime or driver call** of a known kind on that thread (`cuda_runtime` /
  `cuda_driver`, HIP's calls included; `RUNTIME_KINDS`) goes to that call instead, the op or
  frame it was called from kept as its `context`: `alloc` (cudaMalloc, hipMalloc, ...), `free`
  (cudaFree, hipFree, ...), `context` (a free before any launch of its process: the first
  cudaFree creates the CUDA context; cuInit, cuCtxCreate), `sync` (*Synchronize, synchronous
  cudaMemcpy / hipMemcpy / hipMemcpyWithStream), `module` (cuModuleLoad*, cuLibraryLoad*,
  hipModuleLoad*) and `launch` (a kernel launch of at least `host_segments.LONG_LAUNCH_US`: a first launch
  loading code). Nested calls count as the outermost. Such a cause carries `kind` and `context`
  (the op or frame holding most of its time; None where nothing was open).
- a piece inside a compiled graph (`## Call CompiledFxGraph <hash> ##`, analysis/gpu/compiled.py)
  whose nodes up to the graph are all the generated wrapper's own calls (aten ops, triton
  launches) goes to the graph: the host is running code inductor generated, launching its
  kernels one by one. The cause then reads `compiled graph <hash> (inductor code)`, carries
  `compiled` {graph, function, region, phase} (compiled.graph_sources) and has the user's compiled
  function as its `frame`; a frame or context in a generated file reads `inductor code
  <file>.py(N): fn` (compiled.readable_causes), never the cache path.
- `idle_causes` sums the pieces per cause, largest first: `cause`, `idle_us`, `share` (of the
  device's idle time, the sum of its gaps, so shares add up to 1), and `frame`: the innermost
  Python frame that held most of that cause's idle time (the code inside the annotation or op;
  ties: the first name; None without stacks). The top `TOP_CAUSES` are kept and the rest summed
  into `(other)`. Each (cause, frame) is summed in time order per (device, thread), then over
  threads in (pid, tid) order; a cause's `idle_us` is the exactly rounded sum (math.fsum) of its
  frames'.

Vectorised over all devices and threads at once (`device_idle_causes`): each host thread's
event and frame times sorted once (`cuts`) and each stretch between two consecutive ones that
lies inside some gap given its cause once (`segments`), so a piece strictly inside a gap is a lookup; every gap is cut by
one binary search for all gaps (`segment_searchsorted`), and only each gap's first and last piece
are placed with `HostTree.enclosing_in` / `FrameForest.enclosing_in`; sums by bincount, in chunks
of whole (device, thread)s. No loop over devices, threads, gaps or events (1,000 GPUs idling over
one host thread were 1,000 passes over it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...trace.model import Trace
from .compiled import BACKWARD, graph_label, readable_causes
from ..intervals import exact_sums, segment_searchsorted, tuple_codes
from .host_segments import KINDS, cuts, frame_codes, piece_keys, segments
from ..tree import frame_forest, host_tree

UNTRACED = "(host idle / not traced)"
OTHER = "(other)"
TOP_CAUSES = 10


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


def step_edges(trace: Trace, t, gap_dev, start, end, opener, first_opener):
    """The gaps with, where the device's rank has steps (iterations.step_windows), the idle
    inside the steps before the device's first activity (opened by its first activity:
    `first_opener`) and after its last (no opener: the main thread is read), merged in time
    order per device: (gap_dev, start, end, opener, extra), extra the edges' time per device."""
    from ..iterations import step_windows
    n = len(t)
    extra = np.zeros(n)
    if not n:
        return gap_dev, start, end, opener, extra
    first = np.minimum.reduceat(t.starts, t.bounds[:-1])
    last = np.maximum.reduceat(t.ends, t.bounds[:-1])
    wd, ws, we = step_windows(trace).of_each(t.rank)
    lead_end, trail_start = np.minimum(we, first[wd]), np.maximum(ws, last[wd])
    lead, trail = lead_end > ws, we > trail_start
    e_dev = np.r_[wd[lead], wd[trail]]
    e_start, e_end = np.r_[ws[lead], trail_start[trail]], np.r_[lead_end[lead], we[trail]]
    e_open = np.r_[np.asarray(first_opener, dtype=np.int64)[wd[lead]], np.full(int(trail.sum()), -1, dtype=np.int64)]
    if not len(e_dev):
        return gap_dev, start, end, opener, extra
    extra = exact_sums(e_dev, n, us=e_end - e_start)["us"]
    dev = np.r_[gap_dev, e_dev]
    s, e, o = np.r_[start, e_start], np.r_[end, e_end], np.r_[opener, e_open]
    order = np.lexsort((s, dev))
    return dev[order], s[order], e[order], o[order], extra


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
    return [readable_causes(trace, _summarise(sums[d], float(gaps.total[d]))) if gaps.total[d] > 0 else []
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


# Pieces summed per bincount: bounds the memory of the pieces (pieces are gaps times the host
# events inside them: 1,000 GPUs idling over one host thread each cut it 1,000 times).
CHUNK_PIECES = 1 << 20
DENSE_BINS = 1 << 22


def _traced_sums(trace, tree, gaps: DeviceGaps, thread, traced, sums) -> None:
    """Add the pieces of the gaps read off a host thread into each device's sums, keyed by
    (cause, frame). A piece strictly inside a gap lies between two consecutive cut times of its
    thread: its cause is the elementary segment's (`segments`, each stretch inside some gap
    once); only each gap's first and last piece are looked up. Sums run in time order within each (device,
    thread) and then over threads in (pid, tid) order, as a gap-by-gap sum would."""
    traced = traced[np.lexsort((traced, thread[traced], gaps.gap_dev[traced]))]
    dev, thr = gaps.gap_dev[traced], thread[traced]
    gs, ge = gaps.start[traced], gaps.end[traced]
    cut_vals, cut_lo, cut_hi = cuts(trace, tree)
    lo = segment_searchsorted(cut_vals, cut_lo[thr], cut_hi[thr], gs, side="right")
    hi = segment_searchsorted(cut_vals, cut_lo[thr], cut_hi[thr], ge, side="left")
    # each gap cut at the thread's times strictly inside it: hi - lo cuts, hi - lo + 1 pieces
    k = hi - lo + 1
    last = len(cut_vals) - 1
    first_end = np.where(k > 1, cut_vals[np.minimum(lo, last)], ge)
    last_start = cut_vals[np.clip(hi - 1, 0, last)]
    ends_cause, ends_frame = piece_keys(trace, tree, np.concatenate((thr, thr)),
                                         np.concatenate((gs, last_start)), np.concatenate((first_end, ge)))
    # the stretches strictly inside a gap (cuts lo .. hi - 2 of each) are all the others read
    many = k > 2
    inner = (np.bincount(lo[many], minlength=len(cut_vals) + 1)
             - np.bincount(hi[many] - 1, minlength=len(cut_vals) + 1))
    used = np.flatnonzero(np.cumsum(inner[:-1]) > 0)
    seg_cause, seg_frame, used_len = segments(trace, tree, used)
    pair = tuple_codes(np.concatenate((seg_cause, ends_cause)), np.concatenate((seg_frame, ends_frame)))
    n_pairs = int(pair.max()) + 1 if len(pair) else 0
    pair_cause, pair_frame = np.zeros(n_pairs, dtype=np.int64), np.zeros(n_pairs, dtype=np.int64)
    pair_cause[pair] = np.concatenate((seg_cause, ends_cause))
    pair_frame[pair] = np.concatenate((seg_frame, ends_frame))
    seg_pair, seg_len = np.zeros(len(cut_vals), dtype=np.int64), np.zeros(len(cut_vals))
    seg_pair[used], seg_len[used] = pair[:len(used)], used_len
    first_pair, last_pair = np.split(pair[len(used):], 2)
    first_len, last_len = first_end - gs, ge - last_start
    dt = np.cumsum(np.r_[True, (dev[1:] != dev[:-1]) | (thr[1:] != thr[:-1])]) - 1
    dt_dev = dev[np.r_[True, dt[1:] != dt[:-1]]]
    # level 1: per (device, thread, pair), in time order; chunks of whole (device, thread)s
    l1_dt, l1_pair, l1_us = [], [], []
    for g0, g1 in _chunks(k, dt):
        piece_dt, piece_pair, piece_len = _pieces(k[g0:g1], lo[g0:g1], dt[g0:g1], first_pair[g0:g1],
                                                  last_pair[g0:g1], first_len[g0:g1], last_len[g0:g1],
                                                  seg_pair, seg_len)
        base, n_dt = int(dt[g0]), int(dt[g1 - 1] - dt[g0]) + 1
        key = (piece_dt - base) * n_pairs + piece_pair
        if n_dt * n_pairs <= DENSE_BINS:
            us = np.bincount(key, weights=piece_len, minlength=n_dt * n_pairs)
            keys = np.flatnonzero(us)  # every piece has a length: a key seen has a sum
            us = us[keys]
        else:
            keys, inverse = np.unique(key, return_inverse=True)
            us = np.bincount(inverse.ravel(), weights=piece_len, minlength=len(keys))
        l1_dt.append(base + keys // n_pairs)
        l1_pair.append(keys % n_pairs)
        l1_us.append(us)
    l1_dt, l1_pair, l1_us = np.concatenate(l1_dt), np.concatenate(l1_pair), np.concatenate(l1_us)
    # level 2: per (device, pair), the threads' sums added in thread order
    keys, inverse = np.unique(dt_dev[l1_dt] * n_pairs + l1_pair, return_inverse=True)
    us2 = np.bincount(inverse.ravel(), weights=l1_us, minlength=len(keys))
    n_names = len(tree.names)
    frame_names = frame_codes(frame_forest(trace))[1] if len(trace.frames) else np.empty(0, dtype=object)
    untraced = n_names + len(frame_names)

    def name_of(c: int) -> str:
        return (str(tree.names[c]) if c < n_names
                else UNTRACED if c == untraced else str(frame_names[c - n_names]))

    n_ctx = untraced + 1
    for key, us in zip(keys.tolist(), us2.tolist()):
        d, p = divmod(key, n_pairs)
        c, fr = int(pair_cause[p]), int(pair_frame[p])
        if c < n_ctx:
            cause = name_of(c)
        else:  # a runtime call: (call name, kind, the op or frame it was called from)
            call, ctx = divmod(c - n_ctx, n_ctx)
            code, kind = divmod(call, len(KINDS))
            cause = (str(tree.names[code]), KINDS[kind], None if ctx == untraced else name_of(ctx))
        sums[d][(cause, str(frame_names[fr]) if fr < len(frame_names) else None)] = us


def _chunks(k: np.ndarray, dt: np.ndarray):
    """[g0, g1) ranges of gaps holding about CHUNK_PIECES pieces (at least one (device,
    thread)), cut between (device, thread)s only, so that each one's sums run in one bincount."""
    starts = np.flatnonzero(np.r_[True, dt[1:] != dt[:-1]])
    bounds = np.r_[starts, len(k)]
    before = np.r_[0, np.cumsum(k)][bounds]  # pieces before each (device, thread), and in all
    i = 0
    while i < len(starts):
        j = max(i + 1, int(np.searchsorted(before, before[i] + CHUNK_PIECES, side="right")) - 1)
        yield int(bounds[i]), int(bounds[j])
        i = j


def _pieces(k, lo, dt, first_pair, last_pair, first_len, last_len, seg_pair, seg_len):
    """Each piece's (device, thread) group, pair and length, gap after gap, in time order."""
    gap_of = np.repeat(np.arange(len(k)), k)
    j = np.arange(len(gap_of)) - np.repeat(np.cumsum(k) - k, k)
    m = np.clip(lo[gap_of] + j - 1, 0, max(len(seg_pair) - 1, 0))
    pair = seg_pair[m] if len(seg_pair) else np.zeros(len(m), dtype=np.int64)
    length = seg_len[m] if len(seg_len) else np.zeros(len(m))
    head = j == 0
    tail = (j == k[gap_of] - 1) & ~head
    pair[head], length[head] = first_pair[gap_of[head]], first_len[gap_of[head]]
    pair[tail], length[tail] = last_pair[gap_of[tail]], last_len[gap_of[tail]]
    return dt[gap_of], pair, length


def _summarise(sums: dict, total: float) -> list[dict]:
    """Causes largest first from the (cause, frame) sums: a cause's time is the exactly rounded
    sum of its frames' (math.fsum: no order to depend on), its frame the one with the most
    (ties: the first name). A runtime call's cause is (name, kind, context): summed per (name,
    kind), its context the one with the most (ties: the first name)."""
    by_frame: dict = {}
    by_context: dict = {}
    for (cause, frame), us in sums.items():
        key = cause[:2] if isinstance(cause, tuple) else cause
        by_frame.setdefault(key, {}).setdefault(frame, []).append(us)
        if isinstance(cause, tuple):
            by_context.setdefault(key, {}).setdefault(cause[2], []).append(us)
    by_cause = {c: math.fsum(u for us in v.values() for u in us) for c, v in by_frame.items()}
    best, context = {}, {}
    for c, v in by_frame.items():
        name = c[0] if isinstance(c, tuple) else c
        named = [(-math.fsum(us), f) for f, us in v.items() if f is not None and f != name]
        if named:
            best[c] = min(named)[1]
    for c, v in by_context.items():
        named = [(-math.fsum(us), x) for x, us in v.items() if x is not None]
        context[c] = min(named)[1] if named else None
    ranked = sorted(by_cause.items(), key=lambda kv: (-kv[1],) + ((kv[0][0], kv[0][1]) if isinstance(kv[0], tuple)
                                                                  else (kv[0], "")))
    out = []
    for c, us in ranked:
        row = {"cause": c[0] if isinstance(c, tuple) else c, "idle_us": us, "share": us / total,
               "frame": best.get(c)}
        if isinstance(c, tuple):
            row.update(kind=c[1], context=context[c])
        out.append(row)
    if len(out) > TOP_CAUSES:
        rest = sum(o["idle_us"] for o in out[TOP_CAUSES - 1:])
        out = out[:TOP_CAUSES - 1] + [{"cause": OTHER, "idle_us": rest, "share": rest / total,
                                        "frame": None}]
    return out


def cause_label(c: dict) -> str:
    """A cause as the reports say it: a runtime call with the op it was called from
    (`cudaFree (called from aten::convolution_backward)`), a compiled graph with the phase it
    runs in (`compiled graph f4qcacf6 (inductor code, in env_step)`; a backward graph: `in
    autograd backward`), else the cause itself."""
    src = c.get("compiled")
    if src:
        where = src.get("phase") or ("autograd backward" if src.get("region") == BACKWARD else None)
        return graph_label(src["graph"], where) or c["cause"]
    if c.get("context"):
        return f"{c['cause']} (called from {c['context']})"
    return c["cause"]
