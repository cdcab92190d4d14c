"""Typed trace structs -> the columnar events table (see model.py for the columns)."""
from __future__ import annotations

import re
from typing import Iterable

import numpy as np
import pandas as pd

from .decode import Event, TraceDoc
from .model import CATEGORY_ALIASES, GPU_ACTIVITY_CATS

_RANK_NAME = re.compile(r"^\s*rank\s*[-_#:]?\s*(\d+)\s*$", re.IGNORECASE)
_STREAM_TID = re.compile(r"stream\s*(\d+)", re.IGNORECASE)


def rank_processes(doc: TraceDoc) -> dict[int, int]:
    """pid -> rank from `process_name` metadata events named `rank <r>` (merged traces)."""
    found: dict[int, int] = {}
    for ev in doc.traceEvents:
        if ev.ph == "M" and ev.name == "process_name" and ev.args is not None:
            match = _RANK_NAME.match(str(ev.args.process_name or ""))
            if match:
                found[_int_id(ev.pid, {})] = int(match.group(1))
    return found


def _int_id(value, names: dict[str, int]) -> int:
    """Ints stay; numeric strings become ints; other strings get stable negative ids."""
    if value.__class__ is int:
        return value
    if value is None:
        return -1
    text = str(value)
    if text.lstrip("-").isdigit():
        return int(text)
    return names.setdefault(text, -2 - len(names))


def _ints(values: Iterable, n: int) -> np.ndarray:
    """Arg values -> int64 array, -1 where absent or not an integer (e.g. ROCm's '0x0')."""
    return np.fromiter((v if v.__class__ is int else _parse_int(v) for v in values), np.int64, n)


def _parse_int(v) -> int:
    if v.__class__ is str and v.isdigit():
        return int(v)
    if v.__class__ is float and v == v and v.is_integer():
        return int(v)
    return -1


def events_table(doc: TraceDoc, pid_rank: dict[int, int] | None, default_rank: int) -> tuple[pd.DataFrame, int]:
    """Complete events of one document as a table; also the number of unusable X events skipped."""
    xs: list[Event] = [e for e in doc.traceEvents if e.ph == "X"]
    usable = [e for e in xs if e.ts.__class__ in (int, float) and e.ts == e.ts]
    skipped = len(xs) - len(usable)
    n = len(usable)
    names: dict[str, int] = {}
    pid = np.fromiter((_int_id(e.pid, names) for e in usable), np.int64, n)
    tid = np.fromiter((_int_id(e.tid, names) for e in usable), np.int64, n)
    ts = np.fromiter((e.ts for e in usable), np.float64, n)
    dur = np.fromiter((d if (d := e.dur).__class__ in (int, float) and d == d and d >= 0 else 0.0
                       for e in usable), np.float64, n)
    cat = pd.Categorical([CATEGORY_ALIASES.get(c, c) if c.__class__ is str else "" for c in
                          (e.cat for e in usable)])
    name = pd.Categorical([s if s.__class__ is str else ("" if s is None else str(s))
                           for s in (e.name for e in usable)])
    args = [e.args for e in usable]
    none = _EMPTY_ARGS
    args = [a if a is not None else none for a in args]
    external = _ints((a.external_id if a.external_id is not None else a.external_id_2021
                      for a in args), n)
    stream = _ints((a.stream for a in args), n)
    is_gpu = np.asarray(cat.isin(GPU_ACTIVITY_CATS))
    if is_gpu.any():
        # 2021 traces name GPU threads "stream 7" and ROCm writes streams as hex strings.
        tid_streams = np.array([_stream_from_tid(e.tid) for e in usable], dtype=np.int64)
        stream = np.where(stream >= 0, stream, tid_streams)
    device = _ints((a.device for a in args), n)
    device = np.where(is_gpu & (device < 0), pid, device)
    if pid_rank:
        rank = np.fromiter((pid_rank.get(p, default_rank) for p in pid.tolist()), np.int32, n)
    else:
        rank = np.full(n, default_rank, dtype=np.int32)
    table = pd.DataFrame({
        "rank": rank, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "end": ts + dur,
        "name": name, "cat": cat,
        "device": np.where(is_gpu, device, -1).astype(np.int32),
        "stream": np.where(is_gpu, stream, -1),
        "correlation": _ints((a.correlation for a in args), n),
        "external_id": external,
        "python_id": _ints((a.python_id for a in args), n),
        "python_parent_id": _ints((a.python_parent_id for a in args), n),
        "bytes": np.fromiter((float(b) if (b := a.bytes).__class__ in (int, float) else np.nan
                              for a in args), np.float64, n),
    })
    return table, skipped


def _stream_from_tid(tid) -> int:
    if tid.__class__ is int:
        return tid
    match = _STREAM_TID.search(str(tid))
    return int(match.group(1)) if match else -1


class _NoArgs:
    device = stream = correlation = external_id = external_id_2021 = None
    python_id = python_parent_id = bytes = process_name = labels = None


_EMPTY_ARGS = _NoArgs()


def concat_tables(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Stack per-file tables; categories are unioned so names stay interned."""
    if len(tables) == 1:
        out = tables[0]
    else:
        from pandas.api.types import union_categoricals
        cats = {c: union_categoricals([t[c] for t in tables]) for c in ("name", "cat")}
        out = pd.concat([t.drop(columns=["name", "cat"]) for t in tables], ignore_index=True)
        for c, values in cats.items():
            out[c] = values
        out = out[tables[0].columns]
    order = np.lexsort((out["ts"].to_numpy(), out["rank"].to_numpy()))
    return out.iloc[order].reset_index(drop=True)
