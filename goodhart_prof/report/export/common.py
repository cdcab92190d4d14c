"""What both exporters (Perfetto protobuf, Chrome JSON) share: the summary they return, the
output check, launch -> GPU links as row positions, utilization counter samples, nanoseconds."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ...analysis.host.links import gpu_launches
from ...errors import UserError
from ...trace.model import Trace
from ..common import refuse_overwrite


class ExportError(UserError):
    """The export cannot be written (existing output, unknown format, unusable times)."""


@dataclass
class ExportSummary:
    """What an export wrote, for the CLI line and the tests."""

    path: Path
    format: str                       # "perfetto" or "chrome-json"
    slices: int = 0                   # complete events written as slices (perfetto) / kept (json)
    gpu_slices: int = 0               # of which GPU activity (kernel, memcpy, memset)
    python_slices: int = 0            # of which python_function frames (perfetto)
    overflow_tracks: int = 0
    overflow_slices: int = 0
    flows: int = 0                    # launch -> GPU activity flows
    sync_instants: int = 0
    counter_tracks: int = 0
    counter_samples: int = 0
    iterations: int = 0               # slices on the per-rank `iterations` tracks (perfetto)
    critical_path_slices: int = 0     # spans of the critical path(s) written (one slice each)
    trace_instants: int = 0           # the trace's own instants (perfetto)
    trace_counter_tracks: int = 0     # the trace's own counters (`ph: C`, perfetto)
    trace_counter_samples: int = 0

    def line(self) -> str:
        kinds = f"{self.gpu_slices:,} GPU" + (f", {self.python_slices:,} Python" if self.python_slices else "")
        parts = [f"{self.slices:,} slices ({kinds})"]
        if self.trace_instants:
            parts.append(f"{self.trace_instants:,} trace instants")
        if self.trace_counter_tracks:
            parts.append(f"{self.trace_counter_tracks} trace counter(s)")
        if self.overflow_tracks:
            parts.append(f"{self.overflow_slices:,} on {self.overflow_tracks} overflow track(s)")
        parts += [f"{self.flows:,} launch flows", f"{self.sync_instants:,} sync instants",
                  f"{self.counter_tracks} utilization counter(s)"]
        return f"wrote {self.path} ({self.format}): " + ", ".join(parts)



def check_output(path: str | os.PathLike, force: bool) -> Path:
    """The output path, refused when it exists (unless force) or is a folder."""
    return refuse_overwrite(path, force, ExportError)


def linked_launches(trace: Trace) -> pd.DataFrame:
    """GPU activities whose launch call is in the trace, as positions into trace.events:
    columns `gpu_pos`, `launch_pos`, one row per activity, in GPU-activity order."""
    links = gpu_launches(trace)
    links = links[links["launch_row"].to_numpy() >= 0]
    index = trace.events.index
    return pd.DataFrame({"gpu_pos": index.get_indexer(links["gpu_row"].to_numpy()),
                         "launch_pos": index.get_indexer(links["launch_row"].to_numpy())})


def utilization_samples(analysis) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """(rank, device, times_us, percent) per device: each burstiness window's start and
    utilization, then 0 at the device's last activity end."""
    gpu = analysis.trace.gpu
    last_end = gpu.groupby(["rank", "device"])["end"].max() if len(gpu) else pd.Series(dtype=float)
    out = []
    for b in analysis.burstiness:
        end = float(last_end.get((b.rank, b.device), np.nan))
        times = np.append(np.asarray(b.window_starts, float), end)
        values = np.append(np.asarray(b.window_util, float) * 100.0, 0.0)
        keep = np.isfinite(times)
        out.append((b.rank, b.device, times[keep], values[keep]))
    return out



def to_ns(us: np.ndarray) -> np.ndarray:
    """Microseconds (float) -> integer nanoseconds, exact for the 0.25 us steps of absolute clocks:
    the whole microseconds and the fraction are scaled separately."""
    us = np.asarray(us, dtype=np.float64)
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)
