"""The critical path of an iteration: the longest chain of dependent host and GPU work
(docs/DESIGN.md, "Critical path"), on the graph analysis/critical/graph.py builds (HTA's).

Its length is the sum of its edges' weights; each weighted edge is on an event and on a side:
host (op spans, launch waits) or GPU (kernel spans, kernel -> kernel gaps). The path's `spans`
are its weighted edges in time order, runs on one event merged (the Perfetto export's track).
What-if: per name among the top ones on the path holding at least WHAT_IF_SHARE of it, the longest
path of the same graph with every edge on an event of that name (and side) at weight 0 (`WhatIf`;
DESIGN.md). Each is a whole recompute (on the 586 MB benchmark trace's iteration ~0.12 s), so a
name holding less of the path, whose removal barely moves it, gets none.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...trace.model import Trace
from .graph import GAP, LAUNCH, OP, Edges, Graph, RankTables, build

TOP_OPS = 10
TOP_WHAT_IF = 5  # names per path recomputed without their time, at most
WHAT_IF_SHARE = 0.05  # ... each holding at least this share of the path
LAUNCH_WAIT, KERNEL_GAP, NO_EVENT = "(launch wait)", "(gap between kernels)", "(no event)"
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


@dataclass(frozen=True)
class WhatIf:
    """The path if every event named `name` on `side` took no time: `on_path_us` its time on
    the path now, `path_without_us` the longest path of the graph with its edges at weight 0
    (at least the length less `on_path_us`: another chain may take over)."""

    name: str
    side: str
    on_path_us: float
    path_without_us: float


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
    # the weighted edges in time order, a run on one event merged: ts, end (trace clock, us),
    # start_ns, end_ns (from the window's start), us, name (the event's; LAUNCH_WAIT, KERNEL_GAP), side
    spans: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
    what_if: list[WhatIf] = field(default_factory=list, repr=False)

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


def longest_segments(it: IterationPath, top: int = TOP_SEGMENTS) -> list[PathSegment]:
    """The `top` longest segments of a path, in time order."""
    keep = sorted(range(len(it.segments)), key=lambda i: -it.segments[i].us)[:top]
    return [it.segments[i] for i in sorted(keep)]


# Without iterations the path spans the whole rank; above this many events it is not computed
# (measured: 700k events, 1.8 s, against tens of ms for one iteration), and the note says why.
WHOLE_TRACE_EVENTS = 200_000


def critical_path(trace: Trace, every: bool = False) -> CriticalPath:
    """The critical path on the trace's first rank (the lowest with GPU activity; module
    docstring): of its median iteration by duration (`every`: of each iteration), or of the
    whole rank where no iterations were found. One iteration keeps the cost to a few tens of ms
    (a path is ~50k nodes for a 0.3 s iteration of the V100 trace)."""
    from ..iterations import find_iterations
    if trace.events.empty or not trace.gpu.shape[0]:
        return CriticalPath(None, "none", note="no GPU activity in the trace")
    rank = int(trace.gpu["rank"].min())
    steps = find_iterations(trace).table
    steps = steps[steps["rank"].to_numpy() == rank]
    total = 0
    if len(steps):
        # one window per iteration row: a step number may repeat (a trace of several profiler
        # sessions, each counting from its own start), and its rows are then separate iterations
        per = steps.sort_values(["ts", "step"], kind="stable")
        windows = [(int(s), float(a), float(b)) for s, a, b in zip(per["step"], per["ts"], per["end"])]
        total, scope = len(windows), "iteration"
        if not every:
            by_length = sorted(windows, key=lambda w: (w[2] - w[1], w[0]))
            windows = [by_length[(len(by_length) - 1) // 2]]
    else:
        ev = trace.events
        sel = ev[ev["rank"].to_numpy() == rank]
        if len(sel) > WHOLE_TRACE_EVENTS:
            return CriticalPath(rank, "none", note=(
                f"not computed: no iterations were found, and the whole rank ({len(sel):,} events) "
                f"is over {WHOLE_TRACE_EVENTS:,} (its path took 1.8 s on the 586 MB benchmark "
                "trace); mark iterations (torch.profiler's schedule and prof.step(), or the hooks) "
                "to get it per iteration"))
        windows = [(-1, float(sel["ts"].min()), float(sel["end"].max()))]
        scope = "trace"
    ctx = RankTables(trace, rank)
    paths = [p for p in (_window_path(ctx, *w) for w in windows) if p is not None]
    note = "" if paths else "no host work in the window"
    return CriticalPath(rank, scope, paths, note, total)


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


def _window_path(ctx: RankTables, step: int, t0: float, t1: float) -> IterationPath | None:
    built = build(ctx, t0, t1)
    if built is None:
        return None
    it = _longest(built[0], step, t0, t1, *built[1:])
    it.what_if = what_if(it, *built)
    return it


def what_if(it: IterationPath, g: Graph, chain: Edges, cross: Edges,
            top: int = TOP_WHAT_IF) -> list[WhatIf]:
    """Per name of the `top` on the path (`it.ops`), the longest path with that name's op edges
    (its events' own time: op spans less their children, kernel spans) at weight 0."""
    out = []
    code = g.ctx.code[g.pos].astype(np.int64)
    gpu = np.arange(g.n) >= g.n_host
    op_edge = (chain.kind == OP) & (chain.attr >= 0)
    attr = np.maximum(chain.attr, 0)
    lookup = {str(name): k for k, name in enumerate(g.ctx.names)}
    for r in it.ops.head(top).itertuples():
        if it.length_us <= 0 or r.us < WHAT_IF_SHARE * it.length_us:
            continue  # the ops are sorted by time on the path: later ones hold less
        mine = (code == lookup[str(r.name)]) & (gpu == (r.side == "gpu"))
        zero = op_edge & mine[attr]
        lighter = Edges(chain.src, chain.dst, np.where(zero, 0, chain.weight), chain.kind, chain.attr)
        dist, _ = _distances(g, lighter, cross)
        out.append(WhatIf(str(r.name), str(r.side), float(r.us), float(dist.max()) / 1000.0))
    return out


def _longest(g: Graph, step: int, t0: float, t1: float, chain: Edges, cross: Edges) -> IterationPath:
    dist, edges = _distances(g, chain, cross)
    return _walk(g, step, t0, t1, dist, edges)


def _distances(g: Graph, chain: Edges, cross: Edges) -> tuple[np.ndarray, Edges]:
    """The longest path into each node (ns), and the graph's edges: along a chain the best
    length is a running maximum (lengths less the chain's time are compared), so chains are
    solved at once and cross edges relaxed between passes until nothing changes (rounds: the
    path's switches between chains)."""
    size = 2 * g.n
    tt = g.node_ts
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
    edges = Edges.concat([Edges(chain.src[ok], chain.dst[ok], chain.weight[ok],
                                  chain.kind[ok], chain.attr[ok]), cross])
    return dist, edges


def _walk(g: Graph, step: int, t0: float, t1: float, dist: np.ndarray, e: Edges) -> IterationPath:
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
    return _summary(g, step, t0, t1, np.asarray(path, dtype=np.int64), v, e)


def _summary(g: Graph, step: int, t0: float, t1: float, path: np.ndarray, first: int,
         e: Edges) -> IterationPath:
    n, nh = g.n, g.n_host
    kind, w, attr = e.kind[path], e.weight[path] / 1000.0, e.attr[path]
    on_host = (attr >= 0) & (attr < nh)
    nodes = np.r_[first, e.dst[path]]
    rows = np.unique(g.ctx.labels[g.pos[nodes % n]])
    ops = _ops(g, attr[(kind == OP) & (attr >= 0)], w[(kind == OP) & (attr >= 0)])
    side = np.where((kind == LAUNCH) | ((kind == OP) & on_host), "host", "gpu")
    return IterationPath(
        step, t0, t1, float(w.sum()), float(w[(kind == OP) & on_host].sum()),
        float(w[kind == LAUNCH].sum()), float(w[(kind == OP) & (attr >= nh)].sum()),
        float(w[kind == GAP].sum()), rows, ops,
        _segments(g, e.src[path], e.dst[path], w, side, t0),
        _spans(g, e.src[path], e.dst[path], kind, attr, w, side, t0))


def _ops(g: Graph, event: np.ndarray, us: np.ndarray) -> pd.DataFrame:
    """Time on the path per (name, side), most first (TOP_KEPT rows): `name`, `side`, `us`,
    `count` (events of that name on the path)."""
    key = g.ctx.code[g.pos[event]].astype(np.int64) * 2 + (event >= g.n_host)
    keys, inv = np.unique(key, return_inverse=True)
    total = np.bincount(inv, weights=us, minlength=len(keys))
    _, once = np.unique(event, return_index=True)  # an event has one key: count it once
    count = np.bincount(inv[once], minlength=len(keys))
    name = g.ctx.names[keys // 2]
    top = np.lexsort((name.astype(str), -total))[:TOP_KEPT]
    return pd.DataFrame({"name": name[top], "side": np.where(keys[top] % 2, "gpu", "host"),
                         "us": total[top], "count": count[top]})


def _spans(g: Graph, src: np.ndarray, dst: np.ndarray, kind: np.ndarray, attr: np.ndarray,
           w: np.ndarray, side: np.ndarray, t0: float) -> pd.DataFrame:
    """The path's weighted edges in time order, consecutive ones of one kind on one event merged:
    `ts`, `end` (trace clock, us), `start_ns`, `end_ns` (integer ns from the window's start: the
    graph's own times, exact), `us` (they add up to the length), `name`, `side`."""
    keep = np.flatnonzero(w > 0)
    k, a = kind[keep], attr[keep]
    new = np.r_[True, (k[1:] != k[:-1]) | (a[1:] != a[:-1]) | (src[keep][1:] != dst[keep][:-1])] \
        if len(keep) else np.zeros(0, bool)
    lo = np.flatnonzero(new)
    hi = np.r_[lo[1:], len(keep)]
    first, last = keep[lo], keep[hi - 1] if len(keep) else keep
    # object arrays: a fixed-width str array is as wide as the longest kernel name (thousands of
    # characters) times the spans: 0.6 s on the 586 MB benchmark trace's path
    names = np.asarray(g.ctx.names, dtype=object)[g.ctx.code[g.pos[np.maximum(attr[first], 0)]]]
    names = np.where(kind[first] == LAUNCH, LAUNCH_WAIT, np.where(
        kind[first] == GAP, KERNEL_GAP, np.where(attr[first] >= 0, names, NO_EVENT))).astype(object)
    start_ns, end_ns = g.node_ts[src[first]], g.node_ts[dst[last]]
    return pd.DataFrame({"ts": t0 + start_ns / 1000.0, "end": t0 + end_ns / 1000.0,
                         "start_ns": start_ns, "end_ns": end_ns,
                         "us": np.add.reduceat(w[keep], lo) if len(keep) else np.zeros(0),
                         # object columns as they are: pandas' str dtype copies every (long kernel) name
                         "name": pd.Series(names, dtype=object, copy=False),
                         "side": pd.Series(side[first].astype(object), dtype=object, copy=False)})


def _segments(g: Graph, src: np.ndarray, dst: np.ndarray, w: np.ndarray, side: np.ndarray,
          t0: float) -> list[PathSegment]:
    """Maximal runs of weighted path edges on one side (weight-0 edges join the run)."""
    keep = np.flatnonzero(w > 0)
    if not len(keep):
        return []
    s = side[keep]
    cut = np.flatnonzero(s[1:] != s[:-1]) + 1
    lo, hi = np.r_[0, cut], np.r_[cut, len(keep)]
    us = np.add.reduceat(w[keep], lo)
    ts = t0 + g.node_ts[src[keep[lo]]] / 1000.0
    end = t0 + g.node_ts[dst[keep[hi - 1]]] / 1000.0
    return [PathSegment(str(a), float(b), float(c), float(d))
            for a, b, c, d in zip(s[lo], ts, end, us)]
