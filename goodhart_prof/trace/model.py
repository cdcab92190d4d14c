"""The loaded trace: one columnar table of complete events plus what we know about the ranks.

`Trace.events` has one row per complete (`ph: X`) event, sorted by (rank, ts):

| column | dtype | meaning |
| --- | --- | --- |
| rank | int32 | rank the event belongs to |
| pid, tid | int64 | process / thread (string ids are mapped to stable negative ints) |
| ts, dur, end | float64 | start, duration, end in microseconds (trace clock) |
| name | category | event name (interned) |
| cat | category | category, normalised to current Kineto spelling (`Kernel` -> `kernel`, ...) |
| device | int32 | GPU index for GPU activity (args.device, else pid); -1 otherwise |
| stream | int64 | GPU stream for GPU activity; -1 otherwise |
| correlation | int64 | launch <-> GPU activity link; -1 when absent |
| external_id | int64 | op <-> launch link (`External id`); -1 when absent |
| python_id, python_parent_id | int64 | Python stack frames (`with_stack` traces); -1 when absent |
| bytes | float64 | bytes moved by a memcpy/memset; NaN when absent |
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

GPU_ACTIVITY_CATS = ("kernel", "gpu_memcpy", "gpu_memset")

# 2021-era Kineto spelled categories differently; analyses only ever see the current names.
CATEGORY_ALIASES = {
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "Runtime": "cuda_runtime",
    "Operator": "cpu_op",
    "Python": "python_function",
    "User annotation": "user_annotation",
    "user annotation": "user_annotation",
    "GPU user annotation": "gpu_user_annotation",
}


@dataclass
class Trace:
    events: pd.DataFrame
    paths: list[Path]
    ranks: list[int]
    rank_source: str
    device_properties: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    skipped_events: int = 0
    warnings: list[str] = field(default_factory=list)
    # Derived tables that several analyses share (e.g. GPU-activity launch links), built once.
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def gpu(self) -> pd.DataFrame:
        """GPU activity: kernels, memcpys and memsets (selected once, then cached)."""
        gpu = self.cache.get("gpu")
        if gpu is None:
            gpu = self.cache["gpu"] = self.events[self.events["cat"].isin(GPU_ACTIVITY_CATS)]
        return gpu

    @property
    def devices(self) -> list[tuple[int, int]]:
        """(rank, device) pairs that ran GPU activity."""
        gpu = self.gpu
        if gpu.empty:
            return []
        pairs = gpu[["rank", "device"]].drop_duplicates().sort_values(["rank", "device"])
        return [tuple(map(int, row)) for row in pairs.to_numpy()]

    def select(self, rank: int | None = None, device: int | None = None) -> "Trace":
        """The same trace narrowed to one rank and/or one device (CPU events stay with their rank)."""
        mask = np.ones(len(self.events), dtype=bool)
        if rank is not None:
            mask &= (self.events["rank"] == rank).to_numpy()
        if device is not None:
            is_gpu = self.events["cat"].isin(GPU_ACTIVITY_CATS).to_numpy()
            mask &= ~is_gpu | (self.events["device"] == device).to_numpy()
        events = self.events[mask].reset_index(drop=True)
        ranks = [r for r in self.ranks if rank is None or r == rank]
        return Trace(events, self.paths, ranks, self.rank_source, self.device_properties,
                     self.skipped_events, self.warnings)
