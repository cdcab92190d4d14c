"""What a CUDA event wait waits for, for the critical path's graph (graph.py; docs/DESIGN.md,
"Critical path"), by HTA's rules (hta/analyzers/critical_path_analysis.py,
`_get_cuda_event_record_df`, `_get_cuda_stream_wait_event_df`, `_construct_graph_from_kernels`).

A `cuda_sync` event that waits on a CUDA event names the `cudaEventRecord` call (or
`cudaEventRecordWithFlags`, or HIP's: RECORD_CALLS, where HTA knows the first only) that recorded it
(`wait_on_correlation`) and the stream it was recorded on (`wait_on_stream`). The event stands for
the GPU work launched onto that stream before the record: the **awaited** activity is the last
kernel, memcpy or memset launched (LAUNCH_CALLS, on any thread) onto the record's (GPU, stream)
at or before the record's start. Then:

- a `Stream Wait Event` (from cudaStreamWaitEvent) makes the next GPU activity launched after the
  call, by the same thread onto the waiting stream, wait for the awaited one: its **waiter**.
  HTA takes these in the order the sync events end, kernels by their start: a wait counts for its
  waiter when it ends at or before the waiter starts, and the last such wait is the one kept (a
  later one replaces an earlier one, even where its awaited activity lies outside the window).
- an `Event Sync` (from cudaEventSynchronize) makes the end of that call wait for the awaited one.

The GPU of a stream is its events' pid (Kineto writes a GPU's events under pid = device), and a
sync event's stream its tid, as the graph's `Stream Sync` edges read them. Ties at one time are
broken by row order (HTA's sort is not stable there). All of it is per rank, for every window.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..intervals import tuple_codes

# HTA's runtime launch calls (TraceSymbolTable.get_runtime_launch_events_query)
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync",
                "cudaMemsetAsync", "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipMemcpyAsync",
                "hipMemsetAsync", "hipMemcpyWithStream", "runFunction - job_prep_and_submit_for_execution")
# HTA's cudaEventRecord and cudaStreamWaitEvent, and what else records or waits on an event: torch
# 2.11's CUDA caching records with cudaEventRecordWithFlags (seen on an H200), ROCm with hip*
RECORD_CALLS = ("cudaEventRecord", "cudaEventRecordWithFlags", "hipEventRecord", "hipEventRecordWithFlags")
WAIT_CALLS = ("cudaStreamWaitEvent", "hipStreamWaitEvent")
STREAM_WAIT, EVENT_SYNC = "Stream Wait Event", "Event Sync"


@dataclass(frozen=True)
class EventWaits:
    """Positions in the rank's columns. `waiter[i]` waits for `awaited[i]` (GPU activities, one
    row per waiter); the `Event Sync` `sync[j]`'s call `call[j]` ends after `sync_awaited[j]`."""

    waiter: np.ndarray
    awaited: np.ndarray
    sync: np.ndarray
    call: np.ndarray
    sync_awaited: np.ndarray


def event_waits(ctx) -> EventWaits:
    """The waits of one rank; `ctx` is its graph.RankTables (columns ts, dur, pid, tid, corr,
    stream, wait_stream, wait_corr, is_host, is_sync; names; gpu_pos and launch_pos)."""
    if not (ctx.wait_stream > -1).any():  # no sync event names a record: nothing waits on one
        none = np.zeros(0, dtype=np.int64)
        return EventWaits(none, none, none, none, none)

    def named(*names) -> np.ndarray:
        return np.append(np.isin(ctx.names, names), False)[ctx.code]
    launch = named(*LAUNCH_CALLS)[ctx.launch_pos]
    lpos, gpos = ctx.launch_pos[launch], ctx.gpu_pos[launch]
    awaited_of = _recorded(ctx, lpos, gpos, np.flatnonzero(named(*RECORD_CALLS)))
    waits = np.flatnonzero(ctx.is_sync & named(STREAM_WAIT) & (ctx.corr >= 0))
    src = awaited_of(ctx.wait_corr[waits])
    call = first_call(ctx, waits, np.flatnonzero(named(*WAIT_CALLS)))  # of any duration
    ok = (src >= 0) & (call >= 0)
    waits, src, call = waits[ok], src[ok], call[ok]
    # the waiter: the first launch at or after the call, by its thread, onto the waiting stream
    l_key = _pair_ids((ctx.pid[lpos], ctx.tid[lpos], ctx.stream[gpos]),
                      (ctx.pid[call], ctx.tid[call], ctx.tid[waits]))
    nl = len(lpos)
    at = _last_at_or_before(l_key[:nl], -ctx.ts[lpos], l_key[nl:], -ctx.ts[call], tie=-lpos)
    dest = np.where(at >= 0, gpos[np.maximum(at, 0)], -1)
    end = ctx.ts[waits] + ctx.dur[waits]
    ok = (dest >= 0) & (dest != src) & (end <= ctx.ts[np.maximum(dest, 0)])
    waits, src, dest, end = waits[ok], src[ok], dest[ok], end[ok]
    last = np.lexsort((waits, end, dest))  # per waiter, the wait ending last comes last
    keep = last[np.r_[dest[last][1:] != dest[last][:-1], True]] if len(last) else last
    syncs = np.flatnonzero(ctx.is_sync & named(EVENT_SYNC) & (ctx.corr >= 0))
    s_src = awaited_of(ctx.wait_corr[syncs])
    s_call = first_call(ctx, syncs, np.flatnonzero(ctx.is_host))
    ok = (s_src >= 0) & (s_call >= 0)
    return EventWaits(dest[keep], src[keep], syncs[ok], s_call[ok], s_src[ok])


def _recorded(ctx, lpos: np.ndarray, gpos: np.ndarray, records: np.ndarray):
    """A function: record correlation ids -> the awaited GPU activity (position; -1: none)."""
    waits = np.flatnonzero((ctx.wait_stream > -1) & (ctx.wait_corr >= 0))
    records = records[ctx.corr[records] >= 0]
    # each record's (GPU, stream): from the first sync event naming it
    corr_w, first = np.unique(ctx.wait_corr[waits], return_index=True)
    w = _lookup(corr_w, waits[first], ctx.corr[records])
    records, w = records[w >= 0], w[w >= 0]
    key = _pair_ids((ctx.pid[gpos], ctx.stream[gpos]), (ctx.pid[w], ctx.wait_stream[w]))
    nl = len(lpos)
    prev = _last_at_or_before(key[:nl], ctx.ts[lpos], key[nl:], ctx.ts[records], tie=lpos)
    awaited = np.where(prev >= 0, gpos[np.maximum(prev, 0)], -1)
    # one record per correlation id (the first)
    corr_r, once = np.unique(ctx.corr[records], return_index=True)
    awaited = awaited[once]
    return lambda corr: _lookup(corr_r, awaited, corr)


def first_call(ctx, syncs: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """Per sync event, the first of `calls` (positions, ascending) with its correlation id (-1:
    none); graph.RankTables finds the call a `Stream Sync` waited in this way too."""
    calls = calls[ctx.corr[calls] >= 0]
    corr_c, first = np.unique(ctx.corr[calls], return_index=True)
    return _lookup(corr_c, calls[first], ctx.corr[syncs])


def _lookup(keys: np.ndarray, values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """The value of each query's key (`keys` sorted and distinct, `values` beside them); -1 for a
    key not there."""
    if not len(keys):
        return np.full(len(queries), -1, dtype=np.int64)
    i = np.minimum(np.searchsorted(keys, queries), len(keys) - 1)
    return np.where(keys[i] == queries, values[i], -1)


def _pair_ids(a: tuple, b: tuple) -> np.ndarray:
    """Dense ids of the rows of columns `a` then of columns `b` (as many of each): equal rows,
    equal ids."""
    return tuple_codes(*(np.concatenate((x, y)).astype(np.int64) for x, y in zip(a, b)))


def _last_at_or_before(item_key: np.ndarray, item_t: np.ndarray, query_key: np.ndarray,
                       query_t: np.ndarray, tie: np.ndarray) -> np.ndarray:
    """Per query, the index of the item with its key whose time is the latest at or before the
    query's (among equal times the one with the largest `tie`); -1 when there is none."""
    n = len(item_key)
    key, t = np.concatenate((item_key, query_key)), np.concatenate((item_t, query_t))
    is_query = np.r_[np.zeros(n, bool), np.ones(len(query_key), bool)]
    ties = np.r_[tie, np.zeros(len(query_key), dtype=np.int64)]
    order = np.lexsort((ties, is_query, t, key))  # items before a query at the same time
    seen = np.maximum.accumulate(np.where(order < n, np.arange(len(order)), -1)) if len(order) else order
    last = order[np.maximum(seen, 0)]  # the latest item so far in that order: maybe another key's
    found = (seen >= 0) & (key[last] == key[order])
    out = np.full(len(query_key), -1, dtype=np.int64)
    q = order >= n
    out[order[q] - n] = np.where(found[q], last[q], -1)
    return out
