"""Links between events: GPU activity -> the runtime call that launched it (by `correlation`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from typing import Iterator

from ..trace.model import GPU_ACTIVITY_CATS, Trace

LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


def gpu_launches(trace: Trace) -> pd.DataFrame:
    """One row per GPU activity with its launch call.

    Columns: `gpu_row`, `launch_row` (row labels in trace.events; -1 when the launch is not in
    the trace), `rank`, `device`, `ts`, `end`, `dur`, `launch_ts`, `launch_end`, `pid`, `tid`
    (of the launching thread; -1 when unknown). Built once per trace and cached on it.
    """
    cached = trace.cache.get("gpu_launches")
    if cached is None:
        cached = trace.cache["gpu_launches"] = _gpu_launches(trace)
    return cached


def _gpu_launches(trace: Trace) -> pd.DataFrame:
    ev = trace.events
    gpu = ev[ev["cat"].isin(GPU_ACTIVITY_CATS)]
    rt = ev[ev["cat"].isin(LAUNCH_CATS) & (ev["correlation"] >= 0)]
    left = pd.DataFrame({"gpu_row": gpu.index.to_numpy(), "rank": gpu["rank"].to_numpy(),
                         "correlation": gpu["correlation"].to_numpy(),
                         "device": gpu["device"].to_numpy(), "ts": gpu["ts"].to_numpy(),
                         "end": gpu["end"].to_numpy(), "dur": gpu["dur"].to_numpy()})
    # One launch per (rank, correlation); a duplicate would be a broken trace, keep the first.
    right = pd.DataFrame({"launch_row": rt.index.to_numpy(), "rank": rt["rank"].to_numpy(),
                          "correlation": rt["correlation"].to_numpy(),
                          "launch_ts": rt["ts"].to_numpy(), "launch_end": rt["end"].to_numpy(),
                          "pid": rt["pid"].to_numpy(), "tid": rt["tid"].to_numpy()}
                         ).drop_duplicates(["rank", "correlation"])
    out = left.merge(right, on=["rank", "correlation"], how="left")
    out["launch_row"] = out["launch_row"].fillna(-1).astype(np.int64)
    for col in ("pid", "tid"):
        out[col] = out[col].fillna(-1).astype(np.int64)
    return out.drop(columns="correlation")


def launched_inside(spans: pd.DataFrame, links: pd.DataFrame) -> Iterator[tuple[object, pd.DataFrame]]:
    """For each span (rows with rank, pid, tid, ts, end) that launched GPU work: its label and
    the rows of `links` (a `gpu_launches` selection) whose launch call starts inside it on the
    same thread. Per thread: launches sorted once, two searchsorted calls for all its spans."""
    for key, sp in spans.groupby(["rank", "pid", "tid"], sort=False, observed=True):
        own = links[(links["rank"] == key[0]) & (links["pid"] == key[1]) & (links["tid"] == key[2])]
        if own.empty:
            continue
        own = own.sort_values("launch_ts")
        t = own["launch_ts"].to_numpy()
        lo = np.searchsorted(t, sp["ts"].to_numpy(), side="left")
        hi = np.searchsorted(t, sp["end"].to_numpy(), side="right")
        for label, a, b in zip(sp.index, lo, hi):
            if b > a:
                yield label, own.iloc[a:b]
