"""Links between events: GPU activity -> the runtime call that launched it (by `correlation`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

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
