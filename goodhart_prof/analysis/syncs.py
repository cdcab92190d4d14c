"""Sync points: places where the host waits for the device, each with a site and an iteration.

Kinds (shared/DESIGN.md "sync points"), found as follows:

| kind | event |
| --- | --- |
| `item` | `aten::item`, or a `aten::_local_scalar_dense` not inside another candidate op |
| `nonzero` | `aten::nonzero` (boolean-mask indexing, `masked_select`, `torch.where(c)` call it) |
| `is_nonzero` | `aten::is_nonzero` (`if tensor:`, `bool(t)`) |
| `memcpy_dtoh` | GPU memcpy named `... DtoH ...`, placed on the host at its launch call |
| `memcpy_htod_pageable` | GPU memcpy named `Memcpy HtoD (Pageable -> Device)`, likewise |
| `stream_sync`, `device_sync`, `event_sync` | cuda/hip `Stream/Device/EventSynchronize` calls |
| `sync_memcpy` | blocking `cudaMemcpy` (not `cudaMemcpyAsync`), `hipMemcpy(WithStream)` |

Folding: one wait in the user's code shows up as several events, and is counted once.

1. Candidate ops nest: `if t:` records `aten::is_nonzero > aten::item > aten::_local_scalar_dense`.
   Only the outermost candidate op on a thread counts and gives the kind (`is_nonzero` here).
2. A memcpy launch call or a runtime sync call inside (same rank/pid/tid, time containment) a
   counted op belongs to that op: `.item()` on CUDA is `aten::item > aten::_local_scalar_dense >
   cudaMemcpyAsync (DtoH) + cudaStreamSynchronize`, which is one `item` sync point.
3. A runtime sync call whose innermost enclosing cpu op also launched a counted memcpy belongs to
   that memcpy (`.cpu()`: `aten::copy_ > cudaMemcpyAsync + cudaStreamSynchronize` is one
   `memcpy_dtoh`), and a blocking memcpy call that launched a counted memcpy is that memcpy.
4. Kineto's `cuda_sync` events (`enable_cuda_sync_events`: "Stream Sync", "Event Sync",
   "Context Sync" on the GPU rows, with the `correlation` of the runtime call that waited) are
   the device-side record of a runtime call: they count only through that call, which then is a
   candidate even when its name is not in the table (the kind comes from the sync event's name).
   A sync event whose call is not in the trace counts on its own, with no host site.
   "Stream Wait Event" is a GPU stream waiting for another stream, not the host: never counted.

Site: with Python stacks (`python_function` events on the thread), the innermost user-code frame
enclosing the host call, as `file.py:line fn`; otherwise (or when no user frame encloses it) the
chain of enclosing annotations and ops on the thread, outermost first, ending with the counted op
or call, without the `ProfilerStep#N` element so sites add up across iterations. Iteration: N of
the `ProfilerStep#N` that holds the host call's start on the same rank (any thread), else -1.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..trace.model import Frames, Trace, rows_named
from .intervals import innermost_enclosing
from .links import LAUNCH_CATS, gpu_launches

KINDS = ("item", "nonzero", "is_nonzero", "memcpy_dtoh", "memcpy_htod_pageable",
         "stream_sync", "device_sync", "event_sync", "sync_memcpy")

# Candidate ops; the number orders identical intervals outermost first (is_nonzero holds item).
_OPS = {"aten::is_nonzero": ("is_nonzero", 0), "aten::item": ("item", 1),
        "aten::nonzero": ("nonzero", 2), "aten::_local_scalar_dense": ("item", 3)}
_RUNTIME = {
    "cudaStreamSynchronize": "stream_sync", "hipStreamSynchronize": "stream_sync",
    "cuStreamSynchronize": "stream_sync",
    "cudaDeviceSynchronize": "device_sync", "hipDeviceSynchronize": "device_sync",
    "cuCtxSynchronize": "device_sync",
    "cudaEventSynchronize": "event_sync", "hipEventSynchronize": "event_sync",
    "cuEventSynchronize": "event_sync",
    "cudaMemcpy": "sync_memcpy", "hipMemcpy": "sync_memcpy", "hipMemcpyWithStream": "sync_memcpy",
}
_CUDA_SYNC = {"Stream Sync": "stream_sync", "Event Sync": "event_sync", "Context Sync": "device_sync"}
_DTOH = ("DtoH", "CopyDeviceToHost")
_HTOD_PAGEABLE = "Memcpy HtoD (Pageable"
HOST_CATS = ("cpu_op", "user_annotation")
STEP = re.compile(r"^ProfilerStep#(\d+)$")
COLUMNS = ["rank", "pid", "tid", "ts", "dur", "kind", "site", "iteration", "row"]


def sync_points(trace: Trace) -> pd.DataFrame:
    """One row per sync point: rank, pid, tid, ts, dur (host time of the op or call), kind,
    site, iteration, row (label in trace.events of the host op/call; of the GPU or sync event
    when the host call is not in the trace). Sorted by rank, ts."""
    ev = trace.events
    if ev.empty:
        return _empty()
    ops = _candidate_ops(ev)
    runtime = _candidate_calls(ev)
    memcpy = _memcpys(trace)
    cands = pd.concat([ops, runtime, memcpy], ignore_index=True)
    host = _HostIndex(ev, trace.frames, cands.loc[cands["hosted"].to_numpy(bool), ["rank", "pid", "tid"]])
    ops = _outermost(ops)
    ops = ops[_waits_on_device(ev, ops)]
    runtime = runtime[~host.inside(runtime, ops)]
    memcpy = memcpy[~host.inside(memcpy, ops)]
    runtime = _fold_into_memcpy(runtime, memcpy, host)
    points = pd.concat([ops.assign(call=False), memcpy.assign(call=True), runtime.assign(call=True)],
                       ignore_index=True)
    if points.empty:
        return _empty()
    points = points.sort_values(["rank", "ts"], kind="stable").reset_index(drop=True)
    points["site"] = host.sites(points)
    points["iteration"] = iterations(ev, points["rank"].to_numpy(), points["ts"].to_numpy())
    return points[COLUMNS].astype({"row": np.int64, "iteration": np.int64})


def _empty() -> pd.DataFrame:
    return pd.DataFrame({"rank": pd.Series(dtype=np.int32), "pid": pd.Series(dtype=np.int64),
                         "tid": pd.Series(dtype=np.int64), "ts": pd.Series(dtype=float),
                         "dur": pd.Series(dtype=float), "kind": pd.Series(dtype=object),
                         "site": pd.Series(dtype=object), "iteration": pd.Series(dtype=np.int64),
                         "row": pd.Series(dtype=np.int64)})


def _by_name(ev: pd.DataFrame, table: dict[str, Any], cats: tuple[str, ...]) -> pd.DataFrame:
    """Events whose category is in cats and whose name is a key of table (matched on the
    interned categories, not row by row)."""
    names = ev["name"].cat.categories
    wanted = np.flatnonzero(names.isin(list(table)))
    if len(wanted) == 0:
        return ev.iloc[:0]
    mask = np.isin(ev["name"].cat.codes.to_numpy(), wanted) & ev["cat"].isin(cats).to_numpy()
    return ev[mask]


def _frame(sel: pd.DataFrame, kind, prio=0) -> pd.DataFrame:
    return pd.DataFrame({"rank": sel["rank"].to_numpy(), "pid": sel["pid"].to_numpy(),
                         "tid": sel["tid"].to_numpy(), "ts": sel["ts"].to_numpy(),
                         "dur": sel["dur"].to_numpy(), "end": sel["end"].to_numpy(),
                         "kind": kind, "prio": prio, "row": sel.index.to_numpy(np.int64),
                         "name": sel["name"].astype(str).to_numpy(), "hosted": True})


def _candidate_ops(ev: pd.DataFrame) -> pd.DataFrame:
    sel = _by_name(ev, _OPS, ("cpu_op",))
    names = sel["name"].astype(str)
    return _frame(sel, names.map(lambda n: _OPS[n][0]).to_numpy(),
                  names.map(lambda n: _OPS[n][1]).to_numpy())


def _candidate_calls(ev: pd.DataFrame) -> pd.DataFrame:
    """Runtime sync calls by name, plus the calls Kineto's cuda_sync events point at."""
    calls = _by_name(ev, _RUNTIME, LAUNCH_CATS)
    out = _frame(calls, calls["name"].astype(str).map(_RUNTIME).to_numpy())
    syncs = _by_name(ev, _CUDA_SYNC, ("cuda_sync",))
    if syncs.empty:
        return out
    rt = ev[ev["cat"].isin(LAUNCH_CATS).to_numpy() & (ev["correlation"] >= 0).to_numpy()]
    link = pd.DataFrame({"rank": syncs["rank"].to_numpy(),
                         "correlation": syncs["correlation"].to_numpy(),
                         "sync_row": syncs.index.to_numpy(np.int64),
                         "sync_kind": syncs["name"].astype(str).map(_CUDA_SYNC).to_numpy()})
    right = pd.DataFrame({"rank": rt["rank"].to_numpy(), "correlation": rt["correlation"].to_numpy(),
                          "call_row": rt.index.to_numpy(np.int64)})
    right = right.drop_duplicates(["rank", "correlation"])
    link = link.merge(right, on=["rank", "correlation"], how="left")
    matched = link[link["call_row"].notna()]
    new_rows = matched["call_row"].astype(np.int64)
    fresh = ~new_rows.isin(out["row"]).to_numpy()
    extra = _frame(ev.loc[new_rows[fresh].to_numpy()], matched["sync_kind"].to_numpy()[fresh])
    orphan = link[link["call_row"].isna()]
    lone = _unhosted(ev.loc[orphan["sync_row"].to_numpy()], orphan["sync_kind"].to_numpy())
    return pd.concat([out, extra.drop_duplicates("row"), lone], ignore_index=True)


def _memcpys(trace: Trace) -> pd.DataFrame:
    """DtoH and pageable HtoD memcpys, placed at their launch calls (at the GPU event, with no
    host thread, when the launch call is not in the trace)."""
    ev = trace.events
    names = ev["name"].cat.categories
    dtoh = names[[any(k in n for k in _DTOH) for n in names]]
    pageable = names[[n.startswith(_HTOD_PAGEABLE) for n in names]]
    gpu = ev[(ev["cat"] == "gpu_memcpy").to_numpy() & ev["name"].isin(dtoh.union(pageable)).to_numpy()]
    if gpu.empty:
        return _frame(gpu, np.array([], dtype=object))
    links = gpu_launches(trace).set_index("gpu_row").loc[gpu.index]
    kind = np.where(gpu["name"].isin(dtoh).to_numpy(), "memcpy_dtoh", "memcpy_htod_pageable")
    has = links["launch_row"].to_numpy() >= 0
    hosted = _frame(ev.loc[links["launch_row"].to_numpy()[has]], kind[has])
    return pd.concat([hosted.drop_duplicates("row"), _unhosted(gpu[~has], kind[~has])],
                     ignore_index=True)


def _unhosted(sel: pd.DataFrame, kind) -> pd.DataFrame:
    """Sync points seen only on the device side: no host thread, no enclosing ops."""
    return _frame(sel, kind).assign(pid=-1, tid=-1, hosted=False)


def _outermost(ops: pd.DataFrame) -> pd.DataFrame:
    """Drop candidate ops that lie inside another candidate op on their thread (rule 1)."""
    if ops.empty:
        return ops
    ops = ops.assign(_neg=-ops["dur"]).sort_values(["rank", "pid", "tid", "ts", "_neg", "prio"],
                                                   kind="stable").drop(columns="_neg")
    keep = np.ones(len(ops), dtype=bool)
    key = ops[["rank", "pid", "tid"]].to_numpy()
    end = ops["end"].to_numpy()
    open_key, open_end = None, -np.inf
    for i in range(len(ops)):  # a sweep over candidates only
        k = tuple(key[i])
        if k == open_key and end[i] <= open_end:
            keep[i] = False
        else:
            open_key, open_end = k, end[i]
    return ops[keep].reset_index(drop=True)


def _waits_on_device(ev: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Rule 0: on a rank with CUDA/HIP runtime events, an op that makes no runtime call on its
    thread (`.item()` of a CPU tensor) never waits for the device. CPU-only ranks keep all."""
    keep = np.ones(len(ops), dtype=bool)
    if ops.empty:
        return keep
    rt = ev[ev["cat"].isin(LAUNCH_CATS).to_numpy()]
    gpu_ranks = set(rt["rank"].unique().tolist())
    rt_threads = {k: g["ts"].to_numpy() for k, g in rt.groupby(["rank", "pid", "tid"], sort=False)}
    for key, q in ops.groupby(["rank", "pid", "tid"], sort=False):
        if key[0] not in gpu_ranks:
            continue
        idx = ops.index.get_indexer(q.index)
        starts = np.sort(rt_threads.get(key, np.empty(0)))
        first = np.searchsorted(starts, q["ts"].to_numpy(), side="left")
        inside = first < len(starts)
        inside[inside] = starts[first[inside]] <= q["end"].to_numpy()[inside]
        keep[idx] = inside
    return keep


def _fold_into_memcpy(runtime: pd.DataFrame, memcpy: pd.DataFrame, host: "_HostIndex") -> pd.DataFrame:
    """Rule 3: runtime calls that are, or sit in the same cpu op as, a counted memcpy launch."""
    if runtime.empty or memcpy.empty:
        return runtime
    same_call = runtime["row"].isin(memcpy["row"]).to_numpy()
    op_of_copy = host.innermost_op(memcpy)
    op_of_call = host.innermost_op(runtime)
    same_op = (op_of_call >= 0) & np.isin(op_of_call, op_of_copy[op_of_copy >= 0])
    return runtime[~(same_call | same_op)]


def _start_order(ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Order by start, longer first on ties. Trace events come sorted by start, so only runs of
    equal starts need sorting (a full lexsort of millions of events costs a second)."""
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


class _Nesting:
    """The host events of one thread, sorted by start (longer first), with block maxima of their
    ends so that "the innermost event holding this" costs O(block + n/block), vectorised, however
    far back the holder starts (a long Python frame can hold a million events)."""

    BLOCK = 256

    def __init__(self, cols: dict[str, np.ndarray], idx: np.ndarray):
        idx = idx[_start_order(cols["ts"][idx], cols["dur"][idx])]
        self.ts, self.end = cols["ts"][idx], cols["end"][idx]
        self.row = cols["row"][idx]
        # Events carry their name as a code into label_names (a label per event is not built).
        self.label = cols["label"][idx] if "label" in cols else cols["label_names"][cols["label_codes"][idx]]
        self.is_op = cols["is_op"][idx]
        self.py_id, self.py_parent = cols["python_id"][idx], cols["python_parent_id"][idx]
        pad = (-len(self.end)) % self.BLOCK
        self.block_max = np.concatenate((self.end, np.full(pad, -np.inf))).reshape(
            -1, self.BLOCK).max(axis=1)
        self._by_py_id: tuple[np.ndarray, np.ndarray] | None = None

    def holder(self, k: int, reach: float) -> int:
        """Largest j <= k with end[j] >= reach (-1 if none): with j's start <= the start of
        what is held, that is the innermost event holding it."""
        if k < 0:
            return -1
        b = k // self.BLOCK
        lo = b * self.BLOCK
        hit = np.flatnonzero(self.end[lo:k + 1] >= reach)
        if len(hit):
            return int(lo + hit[-1])
        blocks = np.flatnonzero(self.block_max[:b] >= reach)
        if not len(blocks):
            return -1
        lo = int(blocks[-1]) * self.BLOCK
        return int(lo + np.flatnonzero(self.end[lo:lo + self.BLOCK] >= reach)[-1])

    def enclosing(self, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Innermost event holding each [ts, end] query (-1 if none)."""
        last = np.searchsorted(self.ts, ts, side="right") - 1
        return np.array([self.holder(int(k), e) for k, e in zip(last, end)], dtype=np.int64)

    def parent(self, i: int) -> int:
        """The event holding event i: by Python parent id where the trace has one, else by time."""
        if self.py_id[i] >= 0 and self.py_parent[i] >= 0:
            if self._by_py_id is None:
                order = np.argsort(self.py_id, kind="stable")
                self._by_py_id = (self.py_id[order], order)
            ids, order = self._by_py_id
            j = np.searchsorted(ids, self.py_parent[i])
            if j < len(ids) and ids[j] == self.py_parent[i]:
                return int(order[j])
        return self.holder(i - 1, self.end[i])


class _HostIndex:
    """Host events (ops, annotations, Python frames) of the threads that hold candidates, per
    thread, for containment look-ups around sync candidates (loops run over candidates only)."""

    def __init__(self, ev: pd.DataFrame, frames: Frames, threads: pd.DataFrame):
        cat = ev["cat"]
        is_op = (cat == "cpu_op").to_numpy()
        wanted = is_op | (cat == "user_annotation").to_numpy()
        rank, pid, tid = (ev[c].to_numpy() for c in ("rank", "pid", "tid"))
        cols = {c: ev[c].to_numpy() for c in ("ts", "dur", "end")}
        none = np.full(len(ev), -1, dtype=np.int64)
        names = np.asarray(ev["name"].cat.categories, dtype=object)
        cols.update(row=ev.index.to_numpy(np.int64), label_names=names,
                    label_codes=ev["name"].cat.codes.to_numpy(), is_op=is_op, python_id=none,
                    python_parent_id=none)
        fcols = {c: frames[c] for c in ("ts", "dur", "end", "python_id", "python_parent_id")}
        fcols.update(row=np.full(len(frames), -1, dtype=np.int64), label=frames["name"],
                     is_op=np.zeros(len(frames), dtype=bool))
        f_rank, f_pid, f_tid = frames["rank"], frames["pid"], frames["tid"]
        self.host: dict[tuple, _Nesting] = {}
        self.py: dict[tuple, _Nesting] = {}
        for r, p, t in threads.drop_duplicates().itertuples(index=False):
            key = (int(r), int(p), int(t))
            self.host[key] = _Nesting(cols, np.flatnonzero(wanted & (rank == r) & (pid == p) & (tid == t)))
            py = np.flatnonzero((f_rank == r) & (f_pid == p) & (f_tid == t))
            if len(py):
                self.py[key] = _Nesting(fcols, py)
        self._chain: dict[tuple, dict[int, tuple[str, ...]]] = {}
        self._user: dict[tuple, dict[int, str | None]] = {}

    def inside(self, queries: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
        """Rule 2: whether each query lies inside one of the ops (disjoint per thread)."""
        out = np.zeros(len(queries), dtype=bool)
        if queries.empty or ops.empty:
            return out
        groups = {k: g for k, g in ops.groupby(["rank", "pid", "tid"], sort=False)}
        hosted = queries[queries["hosted"].to_numpy(bool)]
        for key, q in hosted.groupby(["rank", "pid", "tid"], sort=False):
            g = groups.get(key)
            if g is None:
                continue
            g = g.sort_values("ts", kind="stable")
            hit = innermost_enclosing(g["ts"].to_numpy(), g["end"].to_numpy(),
                                      q["ts"].to_numpy(), q["end"].to_numpy())
            out[queries.index.get_indexer(q.index)] = hit >= 0
        return out

    def innermost_op(self, queries: pd.DataFrame) -> np.ndarray:
        """Row label of the innermost cpu op holding each query (-1: none, or an annotation)."""
        out = np.full(len(queries), -1, dtype=np.int64)
        hosted = queries[queries["hosted"].to_numpy(bool)]
        for key, q in hosted.groupby(["rank", "pid", "tid"], sort=False):
            nest = self.host.get(tuple(int(k) for k in key))
            if nest is None:
                continue
            pos = nest.enclosing(q["ts"].to_numpy(), q["end"].to_numpy())
            ok = pos >= 0
            rows = np.full(len(q), -1, dtype=np.int64)
            rows[ok] = np.where(nest.is_op[pos[ok]], nest.row[pos[ok]], -1)
            out[queries.index.get_indexer(q.index)] = rows
        return out

    # -- sites ------------------------------------------------------------------------------------
    def sites(self, points: pd.DataFrame) -> list[str]:
        out: list[str] = [""] * len(points)
        for key, q in points.groupby(["rank", "pid", "tid"], sort=False):
            key = tuple(int(k) for k in key)
            idx = points.index.get_indexer(q.index)
            ts, end = q["ts"].to_numpy(), q["end"].to_numpy()
            py, host = self.py.get(key), self.host.get(key)
            frames = py.enclosing(ts, end) if py is not None else np.full(len(q), -1)
            own = encl = np.full(len(q), -1, dtype=np.int64)
            if host is not None:
                # A counted op is itself a host event: its chain starts at its own position.
                own = pd.Index(host.row).get_indexer(q["row"].to_numpy())
                encl = host.enclosing(ts, end)
            for j, (hosted, name, is_call) in enumerate(zip(q["hosted"], q["name"], q["call"])):
                if not hosted:
                    out[idx[j]] = f"{name} (no host call)"
                    continue
                user = self._user_frame(key, int(frames[j])) if frames[j] >= 0 else None
                if user is not None:
                    out[idx[j]] = user
                    continue
                start = own[j] if (own[j] >= 0 and not is_call) else encl[j]
                chain = self._chain_of(key, int(start)) if start >= 0 else ()
                if is_call or own[j] < 0:
                    chain = chain + (name,)
                out[idx[j]] = " > ".join(chain)
        return out

    def _chain_of(self, key: tuple, pos: int) -> tuple[str, ...]:
        """Names of the host events holding pos and pos itself, outermost first, no ProfilerStep."""
        nest, cache = self.host[key], self._chain.setdefault(key, {})
        todo = []
        while pos >= 0 and pos not in cache:
            todo.append(pos)
            pos = nest.parent(pos)
        chain = cache[pos] if pos >= 0 else ()
        for p in reversed(todo):
            name = str(nest.label[p])
            if not STEP.match(name):
                chain = chain + (name,)
            cache[p] = chain
        return chain

    def _user_frame(self, key: tuple, pos: int) -> str | None:
        """The first user-code frame walking out from frame pos."""
        nest, cache = self.py[key], self._user.setdefault(key, {})
        todo, found = [], None
        while pos >= 0:
            if pos in cache:
                found = cache[pos]
                break
            todo.append(pos)
            found = user_site(nest.label[pos])
            if found is not None:
                break
            pos = nest.parent(pos)
        for p in todo:
            cache[p] = found
        return found


# -- Python frames ---------------------------------------------------------------------------------
_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<fn>.*)$")
# The profiler strips sys.path prefixes, so installed packages look like relative paths: these
# top-level names are library code, never the user's line.
LIBRARY_TOPS = frozenset({
    "torch", "torchvision", "torchaudio", "torchrl", "tensordict", "functorch", "triton",
    "numpy", "pandas", "typing_extensions", "einops", "transformers", "accelerate", "apex",
    "deepspeed", "lightning", "pytorch_lightning", "gym", "gymnasium", "stable_baselines3",
    "_pytest", "pytest", "pluggy", "tqdm", "click", "rich", "msgspec",
})
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) - {"test"}


def user_site(frame_name: str) -> str | None:
    """`file.py:line fn` for a Kineto Python frame name of user code, else None."""
    m = _FRAME.match(frame_name) if isinstance(frame_name, str) else None
    if m is None:
        return None
    path = m["file"]
    if path.startswith("<"):
        if not (path == "<stdin>" or path.startswith("<ipython-input")):
            return None
    elif not is_user_path(path):
        return None
    return f"{path}:{m['line']} {m['fn']}"


def is_user_path(path: str) -> bool:
    p = path.replace("\\", "/")
    if "site-packages/" in p or "dist-packages/" in p or re.search(r"/lib/python\d", p):
        return False
    if "/torch/" in p:
        return False
    if p.startswith("/"):
        return True
    top = p.split("/", 1)[0]
    top = top[:-3] if top.endswith(".py") else top
    return top not in LIBRARY_TOPS and top not in _STDLIB


# -- iterations ------------------------------------------------------------------------------------
def profiler_steps(ev: pd.DataFrame) -> pd.DataFrame:
    """Host-side `ProfilerStep#N` events (user annotations; cpu ops in 2021 traces) with `step`."""
    sel = ev.iloc[rows_named(ev, STEP, HOST_CATS)]
    step = np.array([int(str(n)[len("ProfilerStep#"):]) for n in sel["name"]], dtype=np.int64)
    return sel.assign(step=step)


def iterations(ev: pd.DataFrame, rank: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """N of the ProfilerStep#N on the same rank (any thread) whose interval holds ts, else -1."""
    out = np.full(len(ts), -1, dtype=np.int64)
    steps = profiler_steps(ev)
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


# -- summary ---------------------------------------------------------------------------------------
@dataclass
class SyncSummary:
    total: int
    by_kind: dict[str, int]
    sites: pd.DataFrame = field(repr=False)          # kind, site, count, total_us
    per_iteration: pd.DataFrame = field(repr=False)  # iteration, kind, count

    def to_json(self) -> dict[str, Any]:
        """DESIGN.md's `sync_points` object, plain Python types."""
        per_it = []
        for it, g in self.per_iteration.groupby("iteration", sort=True):
            by_kind = {k: 0 for k in KINDS}
            by_kind.update({str(k): int(c) for k, c in zip(g["kind"], g["count"])})
            per_it.append({"iteration": int(it), "count": int(g["count"].sum()), "by_kind": by_kind})
        return {
            "total": int(self.total),
            "by_kind": {k: int(v) for k, v in self.by_kind.items()},
            "sites": [{"kind": str(k), "site": str(s), "count": int(c), "total_us": float(t)}
                      for k, s, c, t in self.sites[["kind", "site", "count", "total_us"]]
                      .itertuples(index=False)],
            "per_iteration": per_it,
        }


def sync_summary(points: pd.DataFrame) -> SyncSummary:
    """Counts per kind, per (kind, site) with host time, and per (iteration, kind)."""
    by_kind = {k: 0 for k in KINDS}
    counts = points["kind"].value_counts()
    by_kind.update({str(k): int(v) for k, v in counts.items()})
    sites = (points.groupby(["kind", "site"], sort=False)["dur"].agg(["size", "sum"])
             .rename(columns={"size": "count", "sum": "total_us"}).reset_index()
             .sort_values(["count", "total_us", "kind", "site"], ascending=[False, False, True, True],
                          kind="stable").reset_index(drop=True))
    per_it = (points.groupby(["iteration", "kind"], sort=True).size().rename("count").reset_index()
              if len(points) else pd.DataFrame({"iteration": [], "kind": [], "count": []}))
    return SyncSummary(int(len(points)), by_kind, sites, per_it)


def op_sites(trace: Trace, rows: pd.Index | np.ndarray) -> list[str]:
    """Sites of host ops (row labels in trace.events), by the rules sync points use: the
    innermost user-code frame when the trace has stacks, else the chain of annotations and ops."""
    if len(rows) == 0:
        return []
    ev = trace.events.loc[np.asarray(rows)]
    ops = pd.DataFrame({"rank": ev["rank"].to_numpy(), "pid": ev["pid"].to_numpy(),
                        "tid": ev["tid"].to_numpy(), "ts": ev["ts"].to_numpy(),
                        "end": ev["end"].to_numpy(), "row": ev.index.to_numpy(np.int64),
                        "name": ev["name"].astype(str).to_numpy(), "hosted": True, "call": False})
    host = _HostIndex(trace.events, trace.frames, ops[["rank", "pid", "tid"]])
    return host.sites(ops)
