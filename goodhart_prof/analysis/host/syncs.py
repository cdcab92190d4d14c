"""Sync points: places where the host waits for the device, each with a site and an iteration.

Kinds (docs/DESIGN.md "sync points"), found as follows:

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

Site: `analysis/host/sites.py` (the innermost user-code frame around the host call, else its chain
of annotations and ops in the host call tree). Iteration: N of the `ProfilerStep#N` that holds
the host call's start on the same rank (any thread), else -1. Every containment question above
is asked of `analysis/tree/`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ...trace.model import Trace, in_categories
from ..intervals import group_totals, sorted_rows, tuple_codes
from .links import LAUNCH_CATS, gpu_launches
from .sites import sites
from ..iterations import iterations
from ..tree import covered, host_tree, outermost, sums_inside
from ..memo import derived

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
COLUMNS = ["rank", "pid", "tid", "ts", "dur", "kind", "site", "iteration", "row", "background"]


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
    ops = ops.iloc[outermost(ops, tie="prio")].reset_index(drop=True)
    ops = ops[_waits_on_device(ev, ops)]
    runtime = runtime[~covered(ops, runtime)]
    memcpy = memcpy[~covered(ops, memcpy)]
    runtime = _fold_into_memcpy(trace, runtime, memcpy)
    points = pd.concat([ops.assign(call=False), memcpy.assign(call=True), runtime.assign(call=True)],
                       ignore_index=True)
    if points.empty:
        return _empty()
    points = points.sort_values(["rank", "ts"], kind="stable").reset_index(drop=True)
    points["site"] = sites(trace, points)
    points["iteration"] = iterations(trace, points["rank"].to_numpy(), points["ts"].to_numpy())
    points["background"] = background(trace, points)
    return points[COLUMNS].astype({"row": np.int64, "iteration": np.int64, "background": bool})


def background(trace: Trace, points: pd.DataFrame) -> np.ndarray:
    """Per point: whether it waits on a background thread (module docstring): a host thread that
    launched no GPU activity in the trace, on a rank where the launching threads are known (some
    GPU activity there has its launch call in the trace)."""
    links = gpu_launches(trace)
    known = links[links["launch_row"].to_numpy() >= 0]
    out = np.zeros(len(points), dtype=bool)
    if known.empty or points.empty:
        return out
    n = len(points)
    # one code per (rank, pid, tid) over the points and the launches together
    thread = tuple_codes(*(np.r_[points[c].to_numpy(np.int64), known[c].to_numpy(np.int64)]
                           for c in ("rank", "pid", "tid")))
    hosted = points["pid"].to_numpy() >= 0
    on_launch_rank = np.isin(points["rank"].to_numpy(np.int64), known["rank"].to_numpy(np.int64))
    return hosted & on_launch_rank & ~np.isin(thread[:n], thread[n:])


def device_ranks(trace: Trace) -> set[int]:
    """Ranks with GPU activity or CUDA/HIP runtime calls, or that allocated GPU memory in a trace
    whose GPU activity was not recorded (gpu_time.unrecorded_gpu): where a read can wait for a
    device (found once per trace, by category code)."""
    return derived(trace, "device_ranks", _device_ranks)


def _device_ranks(trace: Trace) -> set[int]:
    ev = trace.events
    from ..gpu.device_time import unrecorded_gpu
    on = in_categories(ev["cat"], LAUNCH_CATS)
    missing = unrecorded_gpu(trace)
    return (set(pd.unique(ev["rank"].to_numpy()[on]).tolist())  # hashed: no sort of every row
            | set(pd.unique(trace.gpu["rank"].to_numpy()).tolist())
            | (set(missing.ranks) if missing else set()))


# What the reports say of host reads on CPU-only ranks (text report and HTML sync note, one
# wording): `.item()`, `nonzero` and `if tensor:` leave an op and are counted; `.cpu()` and
# `.numpy()` on a CPU tensor return it as is and leave no event, so the trace cannot show them.
CPU_READS_NOTE = ("On the CPU these reads wait for nothing, but each would be a sync point with the "
                  "tensors on a GPU; `.cpu()` and `.numpy()` on CPU tensors are no-ops that leave "
                  "no event at all, so their absence here means nothing.")
CPU_NO_READS_NOTE = ("a CPU-only trace, where nothing waits: no host read (`.item()`, `nonzero`, "
                     "`if tensor:`, each a sync point on a GPU) was seen, and `.cpu()` and "
                     "`.numpy()` on CPU tensors are no-ops that leave no event at all, so their "
                     "absence here means nothing.")


def split_host_reads(trace: Trace, points: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(sync points, host reads): on a CPU-only rank `.item()`, `nonzero` and `if tensor:` wait
    for nothing (the tensor is on the host); they are the reads that would sync on a GPU, kept
    apart so that no report calls them sync points."""
    on_device = points["rank"].isin(device_ranks(trace)).to_numpy()
    return (points[on_device].reset_index(drop=True), points[~on_device].reset_index(drop=True))


def _empty() -> pd.DataFrame:
    return pd.DataFrame({"rank": pd.Series(dtype=np.int32), "pid": pd.Series(dtype=np.int64),
                         "tid": pd.Series(dtype=np.int64), "ts": pd.Series(dtype=float),
                         "dur": pd.Series(dtype=float), "kind": pd.Series(dtype=object),
                         "site": pd.Series(dtype=object), "iteration": pd.Series(dtype=np.int64),
                         "row": pd.Series(dtype=np.int64), "background": pd.Series(dtype=bool)})


def _by_name(ev: pd.DataFrame, table: dict[str, Any], cats: tuple[str, ...]) -> pd.DataFrame:
    """Events whose category is in cats and whose name is a key of table (matched on the
    interned categories, not row by row)."""
    names = ev["name"].cat.categories
    wanted = np.flatnonzero(names.isin(list(table)))
    if len(wanted) == 0:
        return _rows(ev, np.empty(0, dtype=np.int64))
    mask = np.isin(ev["name"].cat.codes.to_numpy(), wanted) & in_categories(ev["cat"], cats)
    return _rows(ev, np.flatnonzero(mask))


def _rows(ev: pd.DataFrame, at: np.ndarray) -> pd.DataFrame:
    """The columns read (_READ) of the rows at positions `at`, in one take (all the columns cost
    milliseconds, and so does selecting the columns of every row first)."""
    return ev.iloc[at, ev.columns.get_indexer(_READ)]


_READ = ["rank", "pid", "tid", "ts", "dur", "end", "name", "correlation"]


def _frame(sel: pd.DataFrame, kind, prio=0) -> pd.DataFrame:
    return pd.DataFrame({"rank": sel["rank"].to_numpy(), "pid": sel["pid"].to_numpy(),
                         "tid": sel["tid"].to_numpy(), "ts": sel["ts"].to_numpy(),
                         "dur": sel["dur"].to_numpy(), "end": sel["end"].to_numpy(),
                         "kind": kind, "prio": prio, "row": sel.index.to_numpy(np.int64),
                         "name": _texts(sel["name"]), "hosted": True})


def _texts(names: pd.Series) -> np.ndarray:
    """A categorical column as text (`astype(str)`), each distinct value made text once."""
    codes = names.cat.codes.to_numpy()
    if (codes < 0).any():  # a missing name: as pandas writes it
        return names.astype(str).to_numpy()
    uniq, inverse = np.unique(codes, return_inverse=True)
    cats = names.cat.categories
    return np.array([str(cats[c]) for c in uniq.tolist()], dtype=object)[inverse.ravel()]


def _candidate_ops(ev: pd.DataFrame) -> pd.DataFrame:
    sel = _by_name(ev, _OPS, ("cpu_op",))
    names = _texts(sel["name"])
    return _frame(sel, np.array([_OPS[n][0] for n in names], dtype=object),
                  np.array([_OPS[n][1] for n in names], dtype=np.int64))


def _candidate_calls(ev: pd.DataFrame) -> pd.DataFrame:
    """Runtime sync calls by name, plus the calls Kineto's cuda_sync events point at."""
    calls = _by_name(ev, _RUNTIME, LAUNCH_CATS)
    out = _frame(calls, np.array([_RUNTIME[n] for n in _texts(calls["name"])], dtype=object))
    syncs = _by_name(ev, _CUDA_SYNC, ("cuda_sync",))
    if syncs.empty:
        return out
    at = np.flatnonzero(in_categories(ev["cat"], LAUNCH_CATS) & (ev["correlation"].to_numpy() >= 0))
    link = pd.DataFrame({"rank": syncs["rank"].to_numpy(),
                         "correlation": syncs["correlation"].to_numpy(),
                         "sync_row": syncs.index.to_numpy(np.int64),
                         "sync_kind": syncs["name"].astype(str).map(_CUDA_SYNC).to_numpy()})
    right = pd.DataFrame({"rank": ev["rank"].to_numpy()[at], "correlation": ev["correlation"].to_numpy()[at],
                          "call_row": ev.index.to_numpy(np.int64)[at]})
    right = right.drop_duplicates(["rank", "correlation"])
    link = link.merge(right, on=["rank", "correlation"], how="left")
    matched = link[link["call_row"].notna()]
    # cudaEventQuery / hipEventQuery poll and return at once: never a wait, whatever points at them.
    calls = ev["name"].loc[matched["call_row"].astype(np.int64).to_numpy()].astype(str)
    matched = matched[~calls.str.contains("EventQuery", regex=False).to_numpy()]
    new_rows = matched["call_row"].astype(np.int64)
    fresh = ~new_rows.isin(out["row"]).to_numpy()
    extra = _frame(_rows(ev, ev.index.get_indexer(new_rows[fresh].to_numpy())),
                   matched["sync_kind"].to_numpy()[fresh])
    orphan = link[link["call_row"].isna()]
    lone = _unhosted(_rows(ev, ev.index.get_indexer(orphan["sync_row"].to_numpy())),
                     orphan["sync_kind"].to_numpy())
    return pd.concat([out, extra.drop_duplicates("row"), lone], ignore_index=True)


def _memcpys(trace: Trace) -> pd.DataFrame:
    """DtoH and pageable HtoD memcpys, placed at their launch calls (at the GPU event, with no
    host thread, when the launch call is not in the trace)."""
    ev = trace.events
    names = ev["name"].cat.categories
    dtoh = names[[any(k in n for k in _DTOH) for n in names]]
    pageable = names[[n.startswith(_HTOD_PAGEABLE) for n in names]]
    gpu = _rows(ev, np.flatnonzero(in_categories(ev["cat"], ("gpu_memcpy",))
                                   & in_categories(ev["name"], dtoh.union(pageable))))
    if gpu.empty:
        return _frame(gpu, np.array([], dtype=object))
    links = gpu_launches(trace).set_index("gpu_row").loc[gpu.index]
    kind = np.where(gpu["name"].isin(dtoh).to_numpy(), "memcpy_dtoh", "memcpy_htod_pageable")
    has = links["launch_row"].to_numpy() >= 0
    hosted = _frame(_rows(ev, ev.index.get_indexer(links["launch_row"].to_numpy()[has])), kind[has])
    return pd.concat([hosted.drop_duplicates("row"), _unhosted(gpu[~has], kind[~has])],
                     ignore_index=True)


def _unhosted(sel: pd.DataFrame, kind) -> pd.DataFrame:
    """Sync points seen only on the device side: no host thread, no enclosing ops."""
    return _frame(sel, kind).assign(pid=-1, tid=-1, hosted=False)


def _waits_on_device(ev: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Rule 0: on a rank with CUDA/HIP runtime events, an op that makes no runtime call on its
    thread (`.item()` of a CPU tensor) never waits for the device. CPU-only ranks keep all."""
    keep = np.ones(len(ops), dtype=bool)
    if ops.empty:
        return keep
    at = np.flatnonzero(in_categories(ev["cat"], LAUNCH_CATS))
    rt = pd.DataFrame({c: ev[c].to_numpy()[at] for c in ("rank", "pid", "tid", "ts")})  # the columns read
    on_gpu_rank = ops["rank"].isin(rt["rank"].unique()).to_numpy()
    (calls,) = sums_inside(ops, rt, "ts", [None])
    return ~on_gpu_rank | (calls > 0)


def _fold_into_memcpy(trace: Trace, runtime: pd.DataFrame, memcpy: pd.DataFrame) -> pd.DataFrame:
    """Rule 3: runtime calls that are, or sit in the same cpu op as, a counted memcpy launch."""
    if runtime.empty or memcpy.empty:
        return runtime
    same_call = runtime["row"].isin(memcpy["row"]).to_numpy()
    op_of_copy = _innermost_op(trace, memcpy)
    op_of_call = _innermost_op(trace, runtime)
    same_op = (op_of_call >= 0) & np.isin(op_of_call, op_of_copy[op_of_copy >= 0])
    return runtime[~(same_call | same_op)]


def _innermost_op(trace: Trace, calls: pd.DataFrame) -> np.ndarray:
    """Row label of the innermost cpu op holding each hosted call (-1: none, or an annotation)."""
    tree = host_tree(trace)
    node = tree.enclosing(*(calls[c].to_numpy() for c in ("rank", "pid", "tid", "ts", "end")))
    ok = (node >= 0) & calls["hosted"].to_numpy(bool)
    out = np.full(len(calls), -1, dtype=np.int64)
    out[ok] = np.where(tree.is_op[node[ok]], tree.row[node[ok]], -1)
    return out


# -- summary ---------------------------------------------------------------------------------------
@dataclass
class SyncSummary:
    total: int
    by_kind: dict[str, int]
    sites: pd.DataFrame = field(repr=False)          # kind, site, count, total_us, background
    per_iteration: pd.DataFrame = field(repr=False)  # iteration, kind, count


def _background_of(points: pd.DataFrame) -> np.ndarray:
    """The points' `background` column (False where a table has none: host reads, old tables)."""
    return points["background"].to_numpy(bool) if "background" in points else np.zeros(len(points), bool)


def sync_summary(points: pd.DataFrame) -> SyncSummary:
    """Counts per kind, per (kind, site) with host time, and per (iteration, kind) (grouped with
    numpy: every analysis makes two summaries, sync points and host reads)."""
    by_kind = {k: 0 for k in KINDS}
    if points.empty:
        return SyncSummary(0, by_kind, pd.DataFrame({"kind": pd.Series(dtype=object),
                                                     "site": pd.Series(dtype=object),
                                                     "count": pd.Series(dtype=np.int64),
                                                     "total_us": pd.Series(dtype=float),
                                                     "background": pd.Series(dtype=bool)}),
                           pd.DataFrame({"iteration": pd.Series(dtype=np.int64),
                                         "kind": pd.Series(dtype=object),
                                         "count": pd.Series(dtype=np.int64)}))
    by_kind.update({str(k): int(c) for k, c in points["kind"].value_counts(sort=False).items()})
    sites = group_totals(points, ["kind", "site"])
    # a site is on a background thread when every one of its points is (its waits hold up nothing)
    fg = group_totals(points[~_background_of(points)], ["kind", "site"])
    in_fg = set(zip(fg["kind"].tolist(), fg["site"].tolist()))
    sites["background"] = np.array([k not in in_fg for k in zip(sites["kind"].tolist(), sites["site"].tolist())],
                                   dtype=bool)
    sites = sorted_rows(sites, ["count", "total_us", "kind", "site"], [False, False, True, True])
    per_it = sorted_rows(group_totals(points, ["iteration", "kind"])[["iteration", "kind", "count"]],
                         ["iteration", "kind"])
    return SyncSummary(int(len(points)), by_kind, sites, per_it)
