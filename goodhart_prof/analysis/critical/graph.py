"""The graph of the critical path (analysis/critical/path.py; docs/DESIGN.md, "Critical path").

It is HTA's (hta/analyzers/critical_path_analysis.py), rebuilt on our tables: a node is
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
  stream, to the end of the runtime call that waited (weight 0);
- a CUDA event wait (event_waits.py: the awaited activity is the last launched onto the recorded
  stream before the cudaEventRecord): a `Stream Wait Event` makes its waiter (the next activity
  launched by that thread onto the waiting stream) start after the awaited one ends (weight 0),
  and then its launch edge needs the awaited one to have ended before the launch, its gap edge
  before the previous kernel's end (HTA's rules); an `Event Sync` (its start in the window, a
  duration) makes the end of the call that waited (cudaEventSynchronize) follow the awaited end
  (weight 0). An awaited activity outside the window: no wait.

Each weighted edge is put on an event (an op or kernel span on the op or kernel holding it; a gap
between children on their parent). Not modelled (yet): the merge of a backward thread into the
forward one that newer HTA does.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from ...trace.model import GPU_ACTIVITY_CATS, Trace, in_categories
from ..tree.parents import parents_and_depths
from .event_waits import event_waits, first_call

HOST_CATS = ("cpu_op", "cuda_runtime", "cuda_driver")
LOCK_CALLS = frozenset(("cudaHostAlloc", "cudaLaunchKernel", "cudaMemcpyAsync"))
BLOCKING_CALLS = frozenset(("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventQuery",
                            "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpyAsync"))
KERNEL_GAP_US = 1500.0  # a longer gap between kernels is a dependency not seen, not a delay
OP, DEP, LAUNCH, GAP, SYNC = range(5)  # edge kinds


class RankTables:
    """One rank's columns, the launch of each GPU activity and the stream queue lengths, built
    once for all its windows."""

    def __init__(self, trace: Trace, rank: int) -> None:
        from ..host.links import gpu_launches
        ev = trace.events
        at = np.flatnonzero(ev["rank"].to_numpy() == rank)
        # the rank's rows of each column read (a copy of every column of them costs milliseconds;
        # a trace of one rank: the columns themselves)
        at = slice(None) if len(at) == len(ev) else at
        self.labels = ev.index.to_numpy()[at]
        self.ts = ev["ts"].to_numpy(float)[at]
        self.dur = ev["dur"].to_numpy(float)[at]
        self.pid = ev["pid"].to_numpy()[at]
        self.tid = ev["tid"].to_numpy()[at]
        names = ev["name"]
        self.code = names.cat.codes.to_numpy()[at]
        self.names = names.cat.categories.astype(str).to_numpy(object)
        self.is_lock = in_categories(names, LOCK_CALLS)[at]
        self.is_blocking = in_categories(names, BLOCKING_CALLS)[at]
        self.is_context = in_categories(names, ("Context Sync",))[at]
        cat = ev["cat"]
        self.is_host = in_categories(cat, HOST_CATS)[at] & (self.dur > 0)
        self.is_gpu = in_categories(cat, GPU_ACTIVITY_CATS)[at]
        self.is_sync = in_categories(cat, ("cuda_sync",))[at]
        self.corr = ev["correlation"].to_numpy()[at]
        self.device = ev["device"].to_numpy()[at]
        self.stream = ev["stream"].to_numpy()[at]
        self.wait_stream = ev["wait_on_stream"].to_numpy()[at]
        self.wait_corr = ev["wait_on_correlation"].to_numpy()[at]
        sorted_labels = bool((np.diff(self.labels) > 0).all())
        index = None if sorted_labels else pd.Series(np.arange(len(self.labels)), index=self.labels)

        def pos(rows: np.ndarray) -> np.ndarray:  # rows of this rank -> positions
            return np.searchsorted(self.labels, rows) if sorted_labels else index.reindex(rows).to_numpy()
        links = gpu_launches(trace)
        mine = (links["rank"].to_numpy() == rank) & (links["launch_row"].to_numpy() >= 0)
        self.gpu_pos = pos(links["gpu_row"].to_numpy()[mine])
        self.launch_pos = pos(links["launch_row"].to_numpy()[mine])
        self.queue_launch, self.queue_kernel = _queue_lengths(
            self.device[self.gpu_pos], self.stream[self.gpu_pos],
            self.ts[self.launch_pos], self.ts[self.gpu_pos])
        # the runtime call each cuda_sync event waited in (same correlation)
        self.sync_pos = np.flatnonzero(self.is_sync & in_categories(names, ("Stream Sync", "Context Sync"))[at])
        self.sync_call = first_call(self, self.sync_pos, np.flatnonzero(self.is_host))
        self.waits = event_waits(self)


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


def group_ids(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A dense id per distinct (a, b) pair, ids in (a, b) order."""
    if not len(a):
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((b, a))
    new = np.r_[True, (a[order][1:] != a[order][:-1]) | (b[order][1:] != b[order][:-1])]
    ids = np.empty(len(a), dtype=np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids


def build(ctx: RankTables, t0: float, t1: float) -> "tuple[Graph, Edges, Edges] | None":
    """The graph of the window [t0, t1]: its chains and its cross edges (None: no host work)."""
    host = np.flatnonzero(ctx.is_host & (ctx.ts >= t0) & (ctx.ts <= t1))
    if not len(host):
        return None
    in_host = np.zeros(len(ctx.ts), dtype=bool)
    in_host[host] = True
    keep = in_host[ctx.launch_pos]
    g = Graph(ctx, host, ctx.gpu_pos[keep], t0, t1)
    lock_chain, lock_cross = g.lock_edges()
    stream_chain, launches = g.stream_chains(ctx.launch_pos[keep], ctx.queue_launch[keep],
                                             ctx.queue_kernel[keep])
    return (g, Edges.concat([g.host_chain(), lock_chain, stream_chain]),
            Edges.concat([lock_cross, launches, g.sync_edges()]))


@dataclass
class Edges:
    """Edges as arrays: src, dst (nodes), weight (ns), kind, attr (the event the edge's time is
    put on, -1: none). In a chain, edge i runs from node i-1 to node i, `src` -1 where the
    chain breaks (no edge into node i)."""

    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    kind: np.ndarray
    attr: np.ndarray

    @classmethod
    def concat(cls, parts: list["Edges"]) -> "Edges":
        return cls(*(np.concatenate([getattr(p, f) for p in parts]).astype(np.int64)
                     for f in ("src", "dst", "weight", "kind", "attr")))


class Graph:
    """Nodes: event k (k < n) has start node k and end node k + n; times in integer ns from the
    window's start (sums stay exact). Edges come as chains (a host thread, the runtime lock's
    ends, a GPU stream: each edge from the node before it in the chain), which the solver runs
    along at once, and cross edges between chains (launches, syncs, lock starts)."""

    def __init__(self, ctx: RankTables, host: np.ndarray, gpu: np.ndarray, t0: float,
                 t1: float) -> None:
        self.ctx, self.t0, self.t1 = ctx, t0, t1
        self.pos = np.concatenate((host, gpu))  # event -> position in the rank's columns
        self.n = len(self.pos)
        self.n_host = len(host)
        ts = np.rint((ctx.ts[self.pos] - t0) * 1000).astype(np.int64)
        self.node_ts = np.concatenate((ts, ts + np.rint(ctx.dur[self.pos] * 1000).astype(np.int64)))
        self.lock = ctx.is_lock[self.pos]
        self.blocking = ctx.is_blocking[self.pos]

    def events_at(self, pos: np.ndarray) -> np.ndarray:
        """The graph's events at positions of the rank's columns (-1: not in the graph)."""
        out = np.full(len(pos), -1, dtype=np.int64)
        for lo, part, order in self._pos_orders:
            at = np.searchsorted(part[order], pos)
            hit = at < len(part)
            hit[hit] = part[order][at[hit]] == pos[hit]
            out[hit] = lo + order[at[hit]]
        return out

    @cached_property
    def _pos_orders(self) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """The host and the GPU events' positions, each with its sort order (sorted once a graph:
        events_at is asked up to four times a window)."""
        nh = self.n_host
        return [(lo, part, np.argsort(part, kind="stable"))
                for lo, part in ((0, self.pos[:nh]), (nh, self.pos[nh:]))]

    def _weight(self, u: np.ndarray, v: np.ndarray, zero: np.ndarray) -> np.ndarray:
        return np.where(zero, 0, np.maximum(self.node_ts[v] - self.node_ts[u], 0))

    def host_chain(self) -> Edges:
        """Each host thread in call order: its ops' starts and ends as a depth-first walk of its
        call tree (ends before starts at one time, the deeper end and the shallower start first)."""
        ctx, n, nh = self.ctx, self.n, self.n_host
        pos = self.pos[:nh]
        ts, end = self.node_ts[:nh], self.node_ts[n:n + nh]
        thread = group_ids(ctx.pid[pos], ctx.tid[pos])
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
        return Edges(src, nodes, weight, kind, attr)

    def lock_edges(self) -> tuple[Edges, Edges]:
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
        cross = Edges(u, v, np.zeros(len(u), np.int64), np.full(len(u), DEP), np.full(len(u), -1))
        after_end = np.r_[False, is_end[:-1]][is_end]
        src = np.where(after_end, np.r_[-1, ends[:-1]], -1)
        m = len(ends)
        chain = Edges(src, ends, np.zeros(m, np.int64), np.full(m, DEP), np.full(m, -1))
        return chain, cross

    def stream_chains(self, launch_pos: np.ndarray, q_launch: np.ndarray, q_kernel: np.ndarray
                      ) -> tuple[Edges, Edges]:
        """Kernels per stream: each one's span, and into it a launch edge (cross) or a kernel ->
        kernel gap (chain), by HTA's queue-length rule."""
        ctx, n, nh = self.ctx, self.n, self.n_host
        ng = n - nh
        gpos = self.pos[nh:]
        k = nh + np.arange(ng)
        self.streams = stream = group_ids(ctx.device[gpos], ctx.stream[gpos])
        order = np.lexsort((self.node_ts[k], stream))
        self.kernel_order = k[order]
        ks, st = k[order], stream[order]
        launch = np.searchsorted(self.pos[:nh], launch_pos)[order]  # host events are sorted
        first = np.r_[True, st[1:] != st[:-1]] if ng else np.zeros(0, bool)
        prev_end = np.r_[-1, ks[:-1] + n]
        prev_end = np.where(first, -1, prev_end)
        launch_ts = self.node_ts[launch]
        prev_ts = self.node_ts[np.maximum(prev_end, 0)]
        # a kernel waiting on a CUDA event (event_waits.py): the awaited activity's end
        waited = self._awaited_ends()[ks]
        waits = waited >= 0
        waited_ts = self.node_ts[np.maximum(waited, 0)]
        fresh = (q_launch[order] == 1) & (q_kernel[order] == 0) & (
            (prev_end < 0) | (prev_ts < launch_ts)) & (~waits | (waited_ts < launch_ts))
        gap = ~fresh & (prev_end >= 0) & (self.node_ts[ks] - prev_ts < KERNEL_GAP_US * 1000) & (
            ~waits | (waited_ts < prev_ts))
        nodes = np.empty(2 * ng, dtype=np.int64)
        nodes[0::2], nodes[1::2] = ks, ks + n
        src = np.empty(2 * ng, dtype=np.int64)
        src[0::2], src[1::2] = np.where(gap, prev_end, -1), ks
        kind = np.empty(2 * ng, dtype=np.int64)
        kind[0::2], kind[1::2] = GAP, OP
        attr = np.empty(2 * ng, dtype=np.int64)
        attr[0::2], attr[1::2] = np.where(gap, prev_end - n, -1), ks
        weight = np.where(src >= 0, self._weight(np.maximum(src, 0), nodes, np.zeros(2 * ng, bool)), 0)
        chain = Edges(src, nodes, weight, kind, attr)
        lu, lv = launch[fresh], ks[fresh]
        wu, wv = waited[waits], ks[waits]
        weight = np.r_[self._weight(lu, lv, np.zeros(len(lu), bool)), np.zeros(len(wu), np.int64)]
        kind = np.r_[np.full(len(lu), LAUNCH), np.full(len(wu), SYNC)]
        cross = Edges(np.r_[lu, wu], np.r_[lv, wv], weight, kind, np.full(len(kind), -1))
        return chain, cross

    def _awaited_ends(self) -> np.ndarray:
        """Per event, the end node of the GPU activity it waits for after a `Stream Wait Event`
        (-1: none, or the awaited activity is not in the graph)."""
        waits = self.ctx.waits
        out = np.full(self.n, -1, dtype=np.int64)
        if len(waits.waiter):
            waiter, awaited = self.events_at(waits.waiter), self.events_at(waits.awaited)
            ok = (waiter >= 0) & (awaited >= 0)
            out[waiter[ok]] = awaited[ok] + self.n
        return out

    def sync_edges(self) -> Edges:
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
        ids = group_ids(np.r_[ctx.device[gpos], ctx.pid[s_pos]], np.r_[ctx.stream[gpos], ctx.tid[s_pos]])
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
        src_e, dst_e = self._event_sync_edges()
        src, dst = np.r_[np.asarray(src, np.int64), src_e], np.r_[np.asarray(dst, np.int64), dst_e]
        m = len(src)
        return Edges(src, dst, np.zeros(m, np.int64), np.full(m, SYNC), np.full(m, -1))

    def _event_sync_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """An `Event Sync` in the window (its start in it, a duration, as HTA clips its window):
        its call ends after the activity it waited for (event_waits.py), both in the graph."""
        waits, ctx, n = self.ctx.waits, self.ctx, self.n
        s = waits.sync
        inside = (ctx.dur[s] > 0) & (ctx.ts[s] >= self.t0) & (ctx.ts[s] <= self.t1)
        if not inside.any():
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        call, awaited = self.events_at(waits.call[inside]), self.events_at(waits.sync_awaited[inside])
        ok = (call >= 0) & (call < self.n_host) & (awaited >= self.n_host)
        return awaited[ok] + n, call[ok] + n
