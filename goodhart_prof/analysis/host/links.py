"""Links between events: GPU activity -> the runtime call that launched it (by `correlation`)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...trace.model import GPU_ACTIVITY_CATS, Trace, in_categories
from ..memo import derived

LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
GRAPH_LAUNCH = re.compile(r"GraphLaunch", re.I)  # cudaGraphLaunch, hipGraphLaunch


def gpu_launches(trace: Trace) -> pd.DataFrame:
    """One row per GPU activity (in trace.gpu's row order) with its launch call.

    Columns: `gpu_row`, `launch_row` (row labels in trace.events; -1 when the launch is not in
    the trace), `rank`, `device`, `ts`, `end`, `dur`, `launch_ts`, `launch_end`, `pid`, `tid`
    (of the launching thread; -1 when unknown). Built once per trace (memo.py).
    """
    return derived(trace, "gpu_launches", _gpu_launches)


def graph_launched(trace: Trace, launch_rows: np.ndarray) -> np.ndarray:
    """Whether each launch call (row labels in trace.events) launches a CUDA/HIP graph, whose
    kernels replay a capture and so have no op of their own; each distinct name tested once."""
    names = trace.events["name"]
    graph = np.array([bool(GRAPH_LAUNCH.search(str(n))) for n in names.cat.categories] + [False])
    return graph[names.cat.codes.to_numpy()[trace.events.index.get_indexer(launch_rows)]]


def _gpu_launches(trace: Trace) -> pd.DataFrame:
    ev = trace.events
    cat = ev["cat"]
    gpu_rows = np.flatnonzero(in_categories(cat, GPU_ACTIVITY_CATS))
    corr = ev["correlation"].to_numpy()
    rt_rows = np.flatnonzero(in_categories(cat, LAUNCH_CATS) & (corr >= 0))
    rank = ev["rank"].to_numpy()
    col = {c: ev[c].to_numpy() for c in ("ts", "end", "pid", "tid")}
    # One launch per (rank, correlation); a duplicate would be a broken trace, keep the first.
    # The join: launches sorted by (rank, correlation), one searchsorted for all GPU rows.
    order = np.lexsort((rt_rows, corr[rt_rows], rank[rt_rows]))
    rt_sorted = rt_rows[order]
    r_rank, r_corr = rank[rt_sorted], corr[rt_sorted]
    first = np.ones(len(rt_sorted), dtype=bool)
    first[1:] = (r_rank[1:] != r_rank[:-1]) | (r_corr[1:] != r_corr[:-1])
    rt_sorted, r_rank, r_corr = rt_sorted[first], r_rank[first], r_corr[first]
    g_rank, g_corr = rank[gpu_rows], corr[gpu_rows]
    # position of each GPU row's (rank, correlation) among the launches: both as one integer
    # key (dense codes of the correlations seen, so no overflow), one searchsorted for all rows
    # (a search per rank was a pass over every GPU row per rank: 20,000 ranks, minutes)
    r_key, g_key = _join_keys(r_rank, r_corr, g_rank, g_corr)
    pos = np.searchsorted(r_key, g_key, side="left")
    inside = pos < len(rt_sorted)
    found = np.zeros(len(gpu_rows), dtype=bool)
    found[inside] = (r_rank[pos[inside]] == g_rank[inside]) & (r_corr[pos[inside]] == g_corr[inside])
    launch = np.full(len(gpu_rows), -1, dtype=np.int64)  # position in ev of each GPU row's launch
    launch[found] = rt_sorted[pos[found]]
    has = launch >= 0
    at = np.where(has, launch, 0)

    def from_launch(values: np.ndarray, missing) -> np.ndarray:
        return np.where(has, values[at], missing) if len(values) else np.full(len(at), missing)
    labels = ev.index.to_numpy()
    return pd.DataFrame({
        "gpu_row": labels[gpu_rows], "rank": g_rank, "device": ev["device"].to_numpy()[gpu_rows],
        "ts": col["ts"][gpu_rows], "end": col["end"][gpu_rows], "dur": ev["dur"].to_numpy()[gpu_rows],
        "launch_row": from_launch(labels, -1).astype(np.int64),
        "launch_ts": from_launch(col["ts"], np.nan), "launch_end": from_launch(col["end"], np.nan),
        "pid": from_launch(col["pid"], -1).astype(np.int64),
        "tid": from_launch(col["tid"], -1).astype(np.int64)})


def _join_keys(r_rank, r_corr, g_rank, g_corr) -> tuple[np.ndarray, np.ndarray]:
    """(rank, correlation) of the launches and the GPU rows as integer keys in the order of the
    pairs: rank x span + correlation + 1 when that fits an int64 (correlations from -1, none,
    up), else with the correlations seen as dense codes (a sort of them all: no overflow)."""
    ranks, corrs = np.concatenate((r_rank, g_rank)), np.concatenate((r_corr, g_corr))
    if len(ranks) and ranks.min() >= 0 and corrs.min() >= -1:
        span = int(corrs.max()) + 2
        if (int(ranks.max()) + 1) * span < 2 ** 62:
            return (r_rank.astype(np.int64) * span + (r_corr.astype(np.int64) + 1),
                    g_rank.astype(np.int64) * span + (g_corr.astype(np.int64) + 1))
    values, codes = np.unique(corrs, return_inverse=True)
    codes = codes.ravel()
    return (r_rank.astype(np.int64) * len(values) + codes[:len(r_corr)],
            g_rank.astype(np.int64) * len(values) + codes[len(r_corr):])
