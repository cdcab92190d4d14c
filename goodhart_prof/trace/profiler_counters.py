"""CUPTI range-profiler counters: the `cuda_profiler_range` events a trace holds when it was recorded
with `torch.profiler._ExperimentalConfig(profiler_metrics=[...], profiler_measure_per_kernel=True)`
(one range per kernel, its counters in `args`: `smsp__sass_thread_inst_executed_op_ffma_pred_on.sum`
and the like). The main decode keeps the events (name, ts, dur) but none of their arguments, whose
keys are the metrics asked for; this second pass reads only those events' `args`, and only for a
trace whose events table holds such a range (rare: a trace without one pays nothing).

`read_counters(trace)` -> long table: `rank`, `ts` (the range's, as in trace.events: a range is
found there by rank and start, which no two ranges share: the profiler serialises kernels to count
them), `counter`, `value`.
"""
from __future__ import annotations

import math
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

from .file_bytes import read_bytes
from .model import Trace, in_categories

RANGE_CAT = "cuda_profiler_range"
_MARK = RANGE_CAT.encode()
COLUMNS = ["rank", "ts", "counter", "value"]


class _Range(msgspec.Struct, frozen=True):
    cat: object = None
    ts: object = None
    args: object = None


class _Doc(msgspec.Struct, frozen=True):
    traceEvents: list[msgspec.Raw] = []


def empty_counters() -> pd.DataFrame:
    return pd.DataFrame({"rank": pd.Series(dtype=np.int64), "ts": pd.Series(dtype=float),
                         "counter": pd.Series(dtype=object), "value": pd.Series(dtype=float)})


def has_ranges(trace: Trace) -> bool:
    """Whether the events table holds a range (its categories tested, not its rows)."""
    return RANGE_CAT in trace.events["cat"].cat.categories


def read_counters(trace: Trace) -> pd.DataFrame:
    """The counters of the trace's ranges (module docstring); empty without ranges. A file that
    cannot be read again (changed since) leaves its ranges without counters, with a warning."""
    if trace.events.empty or not has_ranges(trace):
        return empty_counters()
    ev = trace.events
    at = np.flatnonzero(in_categories(ev["cat"], (RANGE_CAT,)))
    known = set(zip(ev["rank"].to_numpy()[at].tolist(), ev["ts"].to_numpy(float)[at].tolist()))
    ranks = trace.file_ranks if len(trace.file_ranks) == len(trace.paths) else [None] * len(trace.paths)
    cols: dict[str, list] = {c: [] for c in COLUMNS}
    for path, rank in zip(trace.paths, ranks):
        try:
            found = _ranges(Path(path))
        except (OSError, ValueError, msgspec.DecodeError) as exc:
            trace.warnings.append(f"{path}: the CUPTI counters are not read ({exc})")
            continue
        r = 0 if rank is None else int(rank)
        for ts, args in found:
            if (r, ts) not in known:
                continue
            for name, value in args.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    cols["rank"].append(r)
                    cols["ts"].append(ts)
                    cols["counter"].append(str(name))
                    cols["value"].append(float(value))
    if not cols["rank"]:
        return empty_counters()
    return pd.DataFrame({"rank": np.asarray(cols["rank"], dtype=np.int64), "ts": np.asarray(cols["ts"], float),
                         "counter": cols["counter"], "value": np.asarray(cols["value"], dtype=float)})


def _ranges(path: Path) -> list[tuple[float, dict]]:
    """(ts, args) of each range event in the file, in file order."""
    doc = msgspec.json.decode(read_bytes(path), type=_Doc)
    out = []
    for raw in doc.traceEvents:
        if _MARK not in bytes(raw):
            continue
        ev = msgspec.json.decode(raw, type=_Range)
        if ev.cat == RANGE_CAT and isinstance(ev.ts, (int, float)) and isinstance(ev.args, dict):
            out.append((float(ev.ts), ev.args))
    return out
