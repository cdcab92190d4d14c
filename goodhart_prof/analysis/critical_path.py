"""The critical path of an iteration: the longest chain of dependent host and GPU work
(docs/DESIGN.md, "Critical path").

The graph is HTA's (hta/analyzers/critical_path_analysis.py), rebuilt on our tables: a node is
the start or the end of an event (a cpu op or runtime call with a duration, on the host; a kernel,
memcpy or memset whose launch is in the window, on the GPU). Edges, each with a weight in us:

- on each host thread, in call order (enter and leave each op, children inside their parent):
  from one boundary to the next, weighted by the time between them; between two top-level ops
  a dependency of weight 0; leaving a blocking call (cudaStreamSynchronize, cudaMemcpy, ...)
  weighs 0 (the wait is the GPU's time, reached by a sync edge);
- the runtime lock: cudaLaunchKernel, cudaMemcpyAsync and cudaHostAlloc take one lock, so their
  calls (on any thread) chain in the order they end, each call's own start -> end edge weighted
  by its duration, the others weight 0;
- on each GPU stream: each kernel's duration; into each kernel either a launch edge (launch
  start -> kernel start, weighted by the wait) when the stream was empty at the launch and the
  kernel started with nothing queued behind it, else a kernel -> kernel edge from the previous
  kernel's end (weighted by the gap) when the gap is under 1.5 ms;
- a sync: `Stream Sync` from the last kernel on its stream, `Context Sync` from the last on every
  stream, to the end of the runtime call that waited (weight 0).

The critical path is the longest path of that DAG; its length is the sum of its edges' weights.
Each weighted edge is put on an event (an op or kernel span on the op or kernel holding it; a gap
between children on their parent), and on a side: host (op spans, launch waits) or GPU (kernel
spans, kernel -> kernel gaps). Not modelled (yet): cudaEventRecord / cudaStreamWaitEvent and
`Event Sync` edges (the loader keeps no `wait_on_*` args), the merge of a backward thread into the
forward one that newer HTA does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..trace.model import GPU_ACTIVITY_CATS, Trace, in_categories
from .tree.parents import parents_and_depths

HOST_CATS = ("cpu_op", "cuda_runtime", "cuda_driver")
LOCK_CALLS = frozenset(("cudaHostAlloc", "cudaLaunchKernel", "cudaMemcpyAsync"))
BLOCKING_CALLS = frozenset(("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventQuery",
                            "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpyAsync"))
KERNEL_GAP_US = 1500.0  # a longer gap between kernels is a dependency not seen, not a delay
OP, DEP, LAUNCH, GAP, SYNC = range(5)  # edge kinds
TOP_OPS = 10
TOP_SEGMENTS = 10
TOP_KEPT = 50  # names kept per path (the reports show TOP_OPS)


@dataclass(frozen=True)
class PathSegment:
    """A maximal run of the path on one side: `side` "host" or "gpu", from `ts` to `end` (trace
    clock), `us` the path's length inside it."""

    side: str
    ts: float
    end: float
    us: float


@dataclass
class IterationPath:
    """The critical path of one window (an iteration, or the whole trace: `step` -1)."""

    step: int
    ts: float
    end: float
    length_us: float
    host_us: float    # host op spans on the path
    launch_us: float  # launch -> kernel waits on the path (host side)
    gpu_us: float     # kernel spans on the path
    gap_us: float     # kernel -> kernel gaps on the path (GPU side)
    rows: np.ndarray = field(repr=False)   # trace.events row labels of the events on the path
    ops: pd.DataFrame = field(repr=False)  # name, side, us, count: time on the path per name
    segments: list[PathSegment] = field(default_factory=list, repr=False)

    @property
    def host_share(self) -> float:
        return (self.host_us + self.launch_us) / self.length_us if self.length_us > 0 else 0.0

    @property
    def gpu_share(self) -> float:
        return (self.gpu_us + self.gap_us) / self.length_us if self.length_us > 0 else 0.0

    @property
    def bound(self) -> str:
        return "host" if self.host_share >= self.gpu_share else "gpu"


@dataclass
class CriticalPath:
    """The critical path of iterations of one rank (`scope` "iteration": `iterations` those
    computed, of `total` found), or of the whole trace where it has no iterations (`scope`
    "trace"); `shown` the one whose path length is the median (the one the reports detail).
    `note` says why there is none."""

    rank: int | None
    scope: str
    iterations: list[IterationPath] = field(default_factory=list)
    note: str = ""
    total: int = 0

    @property
    def shown(self) -> IterationPath | None:
        if not self.iterations:
            return None
        order = sorted(self.iterations, key=lambda it: (it.length_us, it.step))
        return order[(len(order) - 1) // 2]

    def to_json(self) -> dict[str, Any]:
        shown = self.shown
        return {
            "rank": self.rank, "scope": self.scope, "note": self.note or None,
            "iterations_found": self.total,
            "iterations": [_iteration_json(it) for it in self.iterations],
            "shown_step": None if shown is None else shown.step,
            "ops": [] if shown is None else [
                {"name": str(r.name), "side": r.side, "us": round(float(r.us), 3),
                 "share": round(float(r.us) / shown.length_us, 4) if shown.length_us > 0 else 0.0,
                 "count": int(r.count)} for r in shown.ops.head(TOP_OPS).itertuples()],
            "segments": [] if shown is None else [
                {"side": s.side, "ts": s.ts, "end": s.end, "us": round(s.us, 3)}
                for s in longest_segments(shown)],
        }


def _iteration_json(it: IterationPath) -> dict[str, Any]:
    return {"step": it.step, "ts": it.ts, "end": it.end, "length_us": round(it.length_us, 3),
            "host_us": round(it.host_us, 3), "launch_us": round(it.launch_us, 3),
            "gpu_us": round(it.gpu_us, 3), "gap_us": round(it.gap_us, 3),
            "host_share": round(it.host_share, 4), "gpu_share": round(it.gpu_share, 4),
            "bound": it.bound}


def longest_segments(it: IterationPath, top: int = TOP_SEGMENTS) -> list[PathSegment]:
    """The `top` longest segments of a path, in time order."""
    keep = sorted(range(len(it.segments)), key=lambda i: -it.segments[i].us)[:top]
    return [it.segments[i] for i in sorted(keep)]


def critical_path(trace: Trace, every: bool = False) -> CriticalPath:
    """The critical path on the trace's first rank (the lowest with GPU activity; module
    docstring): of its median iteration by duration (`every`: of each iteration), or of the
    whole rank where no iterations were found. One iteration keeps the cost to a few tens of ms
    (a path is ~50k nodes for a 0.3 s iteration of the V100 trace)."""
    from .iterations import find_iterations
    if trace.events.empty or not trace.gpu.shape[0]:
        return CriticalPath(None, "none", note="no GPU activity in the trace")
    rank = int(trace.gpu["rank"].min())
    steps = find_iterations(trace).table
    steps = steps[steps["rank"].to_numpy() == rank]
    total = 1
    if len(steps):
        per = steps.groupby("step", sort=True).agg(ts=("ts", "min"), end=("end", "max"))
        windows = [(int(s), float(a), float(b)) for s, a, b in zip(per.index, per["ts"], per["end"])]
        total, scope = len(windows), "iteration"
        if not every:
            by_length = sorted(windows, key=lambda w: (w[2] - w[1], w[0]))
            windows = [by_length[(len(by_length) - 1) // 2]]
    else:
        ev = trace.events
        sel = ev[ev["rank"].to_numpy() == rank]
        windows = [(-1, float(sel["ts"].min()), float(sel["end"].max()))]
        scope = "trace"
    ctx = _RankTables(trace, rank)
    paths = [p for p in (_window_path(ctx, *w) for w in windows) if p is not None]
    note = "" if paths else "no host work in the window"
    return CriticalPath(rank, scope, paths, note, total)


class _RankTables:
    """One rank's columns, the launch of each GPU activity and the stream queue lengths, built
    once for all its windows."""

    def __init__(self, trace: Trace, rank: int) -> None:
        from .links import gpu_launches
        ev = trace.events
        at = np.flatnonzero(ev["rank"].to_numpy() == rank)
        sub = ev.iloc[at]
        self.labels = sub.index.to_numpy()
        self.ts = sub["ts"].to_numpy(float)
        self.dur = sub["dur"].to_numpy(float)
        self.pid = sub["pid"].to_numpy()
        self.tid = sub["tid"].to_numpy()
        names = sub["name"]
        self.code = names.cat.codes.to_numpy()
        self.names = names.cat.categories.astype(str).to_numpy(object)
        self.is_lock = in_categories(names, LOCK_CALLS)
        self.is_blocking = in_categories(names, BLOCKING_CALLS)
        self.is_context = in_categories(names, ("Context Sync",))
        cat = sub["cat"]
        self.is_host = in_categories(cat, HOST_CATS) & (self.dur > 0)
        self.is_gpu = in_categories(cat, GPU_ACTIVITY_CATS)
        self.is_sync = in_categories(cat, ("cuda_sync",))
        self.corr = sub["correlation"].to_numpy()
        self.device = sub["device"].to_numpy()
        self.stream = sub["stream"].to_numpy()
        pos = pd.Series(np.arange(len(at)), index=self.labels)
        links = gpu_launches(trace)
        links = links[(links["rank"].to_numpy() == rank) & (links["launch_row"].to_numpy() >= 0)]
        self.gpu_pos = pos.reindex(links["gpu_row"].to_numpy()).to_numpy()
        self.launch_pos = pos.reindex(links["launch_row"].to_numpy()).to_numpy()
        self.queue_launch, self.queue_kernel = _queue_lengths(
            self.device[self.gpu_pos], self.stream[self.gpu_pos],
            self.ts[self.launch_pos], self.ts[self.gpu_pos])
        # the runtime call each cuda_sync event waited in (same correlation)
        host_corr = np.flatnonzero(self.is_host & (self.corr >= 0))
        by_corr = pd.Series(host_corr, index=self.corr[host_corr])
        by_corr = by_corr[~by_corr.index.duplicated()]
        self.sync_pos = np.flatnonzero(self.is_sync & in_categories(names, ("Stream Sync", "Context Sync")))
        self.sync_call = by_corr.reindex(self.corr[self.sync_pos]).fillna(-1).to_numpy(np.int64)


def _queue_lengths(device, stream, launch_ts, kernel_ts) -> tuple[np.ndarray, np.ndarray]:
    """Per GPU activity, the number of operations outstanding on its stream just after its
    launch, and just after it started (HTA's queue length: +1 at each launch, -1 at each start)."""
    n = len(device)
    key = np.concatenate((device, device)).astype(np.int64), np.concatenate((stream, stream))
    t = np.concatenate((launch_ts, kernel_ts))
    step = np.concatenate((np.ones(n), -np.ones(n)))
    order = np.lexsort((t, key[1], key[0]))
    counts = np.cumsum(step[order])
    first = np.ones(len(order), dtype=bool)
    first[1:] = (key[0][order][1:] != key[0][order][:-1]) | (key[1][order][1:] != key[1][order][:-1])
    # restart the running sum at each stream
    base = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    before = np.concatenate(([0.0], counts))[base]
    value = np.empty(len(order))
    value[order] = counts - before
    return value[:n], value[n:]


def _group_ids(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A dense id per distinct (a, b) pair, ids in (a, b) order."""
    if not len(a):
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((b, a))
    new = np.r_[True, (a[order][1:] != a[order][:-1]) | (b[order][1:] != b[order][:-1])]
    ids = np.empty(len(a), dtype=np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids


def _chain_back(parent: np.ndarray, start: int) -> np.ndarray:
    """start, its parent, the parent's parent, ... up to the root (parent[root] == root), by
    pointer jumping: ancestors 2^k steps up for each k, then every step count at once."""
    jumps = [parent]
    while True:
        up = jumps[-1][jumps[-1]]
        if np.array_equal(up, jumps[-1]):
            break
        jumps.append(up)
    root = jumps[-1][start]
    steps, v = 0, start
    for k in range(len(jumps) - 1, -1, -1):
        if jumps[k][v] != root:
            v, steps = int(jumps[k][v]), steps + (1 << k)
    steps += v != root
    hops = np.arange(steps + 1)
    out = np.full(steps + 1, start, dtype=np.int64)
    for k, table in enumerate(jumps):
        bit = (hops >> k) & 1 == 1
        out[bit] = table[out[bit]]
    return out


def _window_path(ctx: _RankTables, step: int, t0: float, t1: float) -> IterationPath | None:
    host = np.flatnonzero(ctx.is_host & (ctx.ts >= t0) & (ctx.ts <= t1))
    if not len(host):
        return None
    in_host = np.zeros(len(ctx.ts), dtype=bool)
    in_host[host] = True
    keep = in_host[ctx.launch_pos]
    g = _Graph(ctx, host, ctx.gpu_pos[keep], t0)
    lock_chain, lock_cross = g.lock_edges()
    chain = [g.host_chain(), lock_chain]
    cross = [lock_cross]
    stream_chain, launches = g.stream_chains(ctx.launch_pos[keep], ctx.queue_launch[keep],
                                             ctx.queue_kernel[keep])
    chain.append(stream_chain)
    cross += [launches, g.sync_edges()]
    return g.longest(step, t0, t1, _Edges.concat(chain), _Edges.concat(cross))


@dataclass
class _Edges:
    """Edges as arrays: src, dst (nodes), weight (ns), kind, attr (the event the edge's time is
    put on, -1: none). In a chain, edge i runs from node i-1 to node i, `src` -1 where the
    chain breaks (no edge into node i)."""

    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    kind: np.ndarray
    attr: np.ndarray

    @classmethod
    def concat(cls, parts: list["_Edges"]) -> "_Edges":
        return cls(*(np.concatenate([getattr(p, f) for p in parts]).astype(np.int64)
                     for f in ("src", "dst", "weight", "kind", "attr")))


class _Graph:
    """Nodes: event k (k < n) has start node k and end node k + n; times in integer ns from the
    window's start (sums stay exact)."""

    def __init__(self, ctx: _RankTables, host: np.ndarray, gpu: np.ndarray, t0: float) -> None:
        self.ctx = ctx
        self.pos = np.concatenate((host, gpu))  # event -> position in the rank's columns
        self.n = n = len(self.pos)
        self.n_host = len(host)
        ts = np.rint((ctx.ts[self.pos] - t0) * 1000).astype(np.int64)
        self.node_ts = np.concatenate((ts, ts + np.rint(ctx.dur[self.pos] * 1000).astype(np.int64)))
        self.lock = ctx.is_lock[self.pos]
        self.blocking = ctx.is_blocking[self.pos]

    def _weight(self, u: np.ndarray, v: np.ndarray, zero: np.ndarray) -> np.ndarray:
        return np.where(zero, 0, np.maximum(self.node_ts[v] - self.node_ts[u], 0))

    def host_chain(self) -> _Edges:
        """Each host thread in call order: its ops' starts and ends as a depth-first walk of its
        call tree (ends before starts at one time, the deeper end and the shallower start first)."""
        ctx, n, nh = self.ctx, self.n, self.n_host
        pos = self.pos[:nh]
        ts, end = self.node_ts[:nh], self.node_ts[n:n + nh]
        thread = _group_ids(ctx.pid[pos], ctx.tid[pos])
        order = np.lexsort((ts - end, ts, thread))
        parent = np.full(nh, -1, dtype=np.int64)
        depth = np.zeros(nh, dtype=np.int64)
        cut = np.flatnonzero(np.diff(thread[order])) + 1
        for part in np.split(order, cut):
            p, d = parents_and_depths(ts[part].astype(float), end[part].astype(float))
            parent[part] = np.where(p >= 0, part[np.maximum(p, 0)], -1)
            depth[part] = d
        k = np.arange(nh)
        nodes = np.concatenate((k, k + n))
        is_start = nodes < n
        ev = nodes % n
        tie = np.where(is_start, depth[ev], -depth[ev])
        nodes = nodes[np.lexsort((tie, is_start, self.node_ts[nodes], thread[ev]))]
        ev, is_start = nodes % n, nodes < n
        src = np.r_[-1, nodes[:-1]]
        same = np.r_[False, thread[ev][1:] == thread[ev][:-1]]
        prev_start, prev_ev = np.r_[False, is_start[:-1]], np.r_[0, ev[:-1]]
        locked = self.lock[ev] & self.lock[prev_ev] & (prev_start | ~is_start)
        locked &= ~(prev_start & ~is_start & (prev_ev == ev) & self.own_lock[ev])
        src = np.where(same & ~locked, src, -1)
        kind = np.where(is_start & (depth[ev] == 0), DEP, OP)
        zero = (kind == DEP) | (~is_start & self.blocking[ev])
        weight = np.where(src >= 0, self._weight(np.maximum(src, 0), nodes, zero), 0)
        attr = np.where(prev_start, prev_ev, np.where(~is_start, ev, parent[prev_ev]))
        attr = np.where(kind == OP, attr, -1)
        return _Edges(src, nodes, weight, kind, attr)

    def lock_edges(self) -> tuple[_Edges, _Edges]:
        """The runtime lock over all threads, in node order (module docstring): each start -> the
        first end after it (cross edges; a call's own start -> end is left to its thread's chain,
        `self.own_lock` says which), and the ends one after the other (a chain)."""
        n = self.n
        locked = np.flatnonzero(self.lock)
        nodes = np.concatenate((locked, locked + n))
        labels = self.ctx.labels[self.pos[nodes % n]]
        nodes = nodes[np.lexsort((labels, self.node_ts[nodes]))]
        is_end = nodes >= n
        next_end = np.searchsorted(np.flatnonzero(is_end), np.arange(len(nodes)))
        ends = nodes[is_end]
        starts = np.flatnonzero(~is_end & (next_end < len(ends)))
        u, v = nodes[starts], ends[next_end[starts]]
        own = v - n == u
        self.own_lock = np.zeros(n, dtype=bool)
        self.own_lock[u[own]] = True
        u, v = u[~own], v[~own]
        cross = _Edges(u, v, np.zeros(len(u), np.int64), np.full(len(u), DEP), np.full(len(u), -1))
        after_end = np.r_[False, is_end[:-1]][is_end]
        src = np.where(after_end, np.r_[-1, ends[:-1]], -1)
        m = len(ends)
        chain = _Edges(src, ends, np.zeros(m, np.int64), np.full(m, DEP), np.full(m, -1))
        return chain, cross

    def stream_chains(self, launch_pos: np.ndarray, q_launch: np.ndarray, q_kernel: np.ndarray
                      ) -> tuple[_Edges, _Edges]:
        """Kernels per stream: each one's span, and into it a launch edge (cross) or a kernel ->
        kernel gap (chain), by HTA's queue-length rule."""
        ctx, n, nh = self.ctx, self.n, self.n_host
        ng = n - nh
        gpos = self.pos[nh:]
        k = nh + np.arange(ng)
        self.streams = stream = _group_ids(ctx.device[gpos], ctx.stream[gpos])
        order = np.lexsort((self.node_ts[k], stream))
        self.kernel_order = k[order]
        ks, st = k[order], stream[order]
        launch = np.searchsorted(self.pos[:nh], launch_pos)[order]  # host events are sorted
        first = np.r_[True, st[1:] != st[:-1]] if ng else np.zeros(0, bool)
        prev_end = np.r_[-1, ks[:-1] + n]
        prev_end = np.where(first, -1, prev_end)
        launch_ts = self.node_ts[launch]
        fresh = (q_launch[order] == 1) & (q_kernel[order] == 0) & (
            (prev_end < 0) | (self.node_ts[np.maximum(prev_end, 0)] < launch_ts))
        gap = ~fresh & (prev_end >= 0) & (
            self.node_ts[ks] - self.node_ts[np.maximum(prev_end, 0)] < KERNEL_GAP_US * 1000)
        nodes = np.empty(2 * ng, dtype=np.int64)
        nodes[0::2], nodes[1::2] = ks, ks + n
        src = np.empty(2 * ng, dtype=np.int64)
        src[0::2], src[1::2] = np.where(gap, prev_end, -1), ks
        kind = np.empty(2 * ng, dtype=np.int64)
        kind[0::2], kind[1::2] = GAP, OP
        attr = np.empty(2 * ng, dtype=np.int64)
        attr[0::2], attr[1::2] = np.where(gap, prev_end - n, -1), ks
        weight = np.where(src >= 0, self._weight(np.maximum(src, 0), nodes, np.zeros(2 * ng, bool)), 0)
        chain = _Edges(src, nodes, weight, kind, attr)
        lu, lv = launch[fresh], ks[fresh]
        cross = _Edges(lu, lv, self._weight(lu, lv, np.zeros(len(lu), bool)),
                       np.full(len(lu), LAUNCH), np.full(len(lu), -1))
        return chain, cross

    def sync_edges(self) -> _Edges:
        """A sync's waiting call ends after the last kernel (before the sync's end) on its stream,
        or on every stream for a `Context Sync`."""
        ctx, n, nh = self.ctx, self.n, self.n_host
        host_pos = self.pos[:nh]
        at = np.searchsorted(host_pos, ctx.sync_call)
        found = (ctx.sync_call >= 0) & (at < nh)
        found[found] = host_pos[at[found]] == ctx.sync_call[found]
        src: list[int] = []
        dst: list[int] = []
        ks = self.kernel_order
        st = self.streams[ks - nh] if len(ks) else np.zeros(0, np.int64)
        gpos = self.pos[nh:]
        # each sync's stream among the kernels' (Kineto writes a GPU row's stream as its tid)
        s_pos = ctx.sync_pos
        ids = _group_ids(np.r_[ctx.device[gpos], ctx.pid[s_pos]], np.r_[ctx.stream[gpos], ctx.tid[s_pos]])
        stream_of_id = np.full(ids.max() + 1 if len(ids) else 0, -1, dtype=np.int64)
        stream_of_id[ids[:len(gpos)]] = self.streams
        sync_stream = stream_of_id[ids[len(gpos):]]
        bounds = np.searchsorted(st, np.arange(st.max() + 2)) if len(st) else np.zeros(1, np.int64)
        t0_ns = self.node_ts[0] - np.rint((ctx.ts[self.pos[0]]) * 1000)
        for i in np.flatnonzero(found).tolist():
            s, call = ctx.sync_pos[i], int(at[i])
            sync_end = np.rint((ctx.ts[s] + ctx.dur[s]) * 1000) + t0_ns
            if ctx.is_context[s]:
                which = range(len(bounds) - 1)
            else:
                which = [int(sync_stream[i])] if sync_stream[i] >= 0 else []
            for w in which:
                lo, hi = bounds[w], bounds[w + 1]
                j = lo + np.searchsorted(self.node_ts[ks[lo:hi]], sync_end) - 1
                if j >= lo:
                    src.append(int(ks[j]) + n)
                    dst.append(call + n)
        m = len(src)
        return _Edges(np.asarray(src, np.int64), np.asarray(dst, np.int64), np.zeros(m, np.int64),
                      np.full(m, SYNC), np.full(m, -1))

    def longest(self, step: int, t0: float, t1: float, chain: _Edges, cross: _Edges) -> IterationPath:
        """The longest path: along a chain the best length is a running maximum (lengths less
        the chain's time are compared), so chains are solved at once and cross edges relaxed
        between passes until nothing changes (rounds: the path's switches between chains)."""
        size = 2 * self.n
        tt = self.node_ts
        ok = chain.src >= 0
        ok[1:] &= chain.src[1:] == chain.dst[:-1]
        ok[0] = False
        cost = np.where(ok, tt[chain.dst] - tt[np.maximum(chain.src, 0)] - chain.weight, 0)
        big = 4 * (int(tt.max() - tt.min()) + 1) + int(np.abs(cost).sum())
        c = np.cumsum(np.where(ok, cost, big))  # a break: no running maximum reaches across
        dist = np.zeros(size, dtype=np.int64)
        for _ in range(size + 1):
            h = np.maximum.accumulate(dist[chain.dst] - tt[chain.dst] + c)
            np.maximum.at(dist, chain.dst, h + tt[chain.dst] - c)
            before = dist.copy()
            np.maximum.at(dist, cross.dst, dist[cross.src] + cross.weight)
            if np.array_equal(before, dist):
                break
        edges = _Edges.concat([_Edges(chain.src[ok], chain.dst[ok], chain.weight[ok],
                                      chain.kind[ok], chain.attr[ok]), cross])
        return self._walk(step, t0, t1, dist, edges)

    def _walk(self, step: int, t0: float, t1: float, dist: np.ndarray, e: _Edges) -> IterationPath:
        """Back from the farthest node along edges that make its length (the first such edge)."""
        tight = np.flatnonzero(dist[e.src] + e.weight == dist[e.dst])
        tight = tight[np.argsort(e.dst[tight], kind="stable")]
        first = np.r_[True, e.dst[tight][1:] != e.dst[tight][:-1]] if len(tight) else tight
        via = np.full(len(dist), -1, dtype=np.int64)
        via[e.dst[tight[first]]] = tight[first]
        nodes = _chain_back(np.where(via >= 0, e.src[np.maximum(via, 0)], np.arange(len(via))),
                            int(np.argmax(dist)))
        path = via[nodes[:-1]][::-1].tolist()
        v = int(nodes[-1])
        # the path ends at its last weighted edge (a node reached by weight-0 edges after it has
        # the same length: HTA's longest path ends at the first such node in topological order)
        while path and e.weight[path[-1]] <= 0:
            path.pop()
        return self._summary(step, t0, t1, np.asarray(path, dtype=np.int64), v, e)

    def _summary(self, step: int, t0: float, t1: float, path: np.ndarray, first: int,
                 e: _Edges) -> IterationPath:
        n, nh = self.n, self.n_host
        kind, w, attr = e.kind[path], e.weight[path] / 1000.0, e.attr[path]
        on_host = (attr >= 0) & (attr < nh)
        nodes = np.r_[first, e.dst[path]]
        rows = np.unique(self.ctx.labels[self.pos[nodes % n]])
        ops = self._ops(attr[(kind == OP) & (attr >= 0)], w[(kind == OP) & (attr >= 0)])
        side = np.where((kind == LAUNCH) | ((kind == OP) & on_host), "host", "gpu")
        return IterationPath(
            step, t0, t1, float(w.sum()), float(w[(kind == OP) & on_host].sum()),
            float(w[kind == LAUNCH].sum()), float(w[(kind == OP) & (attr >= nh)].sum()),
            float(w[kind == GAP].sum()), rows, ops,
            self._segments(e.src[path], e.dst[path], w, side, t0))

    def _ops(self, event: np.ndarray, us: np.ndarray) -> pd.DataFrame:
        """Time on the path per (name, side), most first (TOP_KEPT rows): `name`, `side`, `us`,
        `count` (events of that name on the path)."""
        key = self.ctx.code[self.pos[event]].astype(np.int64) * 2 + (event >= self.n_host)
        keys, inv = np.unique(key, return_inverse=True)
        total = np.bincount(inv, weights=us, minlength=len(keys))
        _, once = np.unique(event, return_index=True)  # an event has one key: count it once
        count = np.bincount(inv[once], minlength=len(keys))
        name = self.ctx.names[keys // 2]
        top = np.lexsort((name.astype(str), -total))[:TOP_KEPT]
        return pd.DataFrame({"name": name[top], "side": np.where(keys[top] % 2, "gpu", "host"),
                             "us": total[top], "count": count[top]})

    def _segments(self, src: np.ndarray, dst: np.ndarray, w: np.ndarray, side: np.ndarray,
                  t0: float) -> list[PathSegment]:
        """Maximal runs of weighted path edges on one side (weight-0 edges join the run)."""
        keep = np.flatnonzero(w > 0)
        if not len(keep):
            return []
        s = side[keep]
        cut = np.flatnonzero(s[1:] != s[:-1]) + 1
        lo, hi = np.r_[0, cut], np.r_[cut, len(keep)]
        us = np.add.reduceat(w[keep], lo)
        ts = t0 + self.node_ts[src[keep[lo]]] / 1000.0
        end = t0 + self.node_ts[dst[keep[hi - 1]]] / 1000.0
        return [PathSegment(str(a), float(b), float(c), float(d))
                for a, b, c, d in zip(s[lo], ts, end, us)]
