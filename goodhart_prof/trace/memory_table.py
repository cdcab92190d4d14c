"""The `[memory]` instants of a document (profile_memory=True) -> the memory table (model.py
MEMORY_COLUMNS), and memory tables stacked."""
from __future__ import annotations

from itertools import compress, repeat
from operator import attrgetter, eq

import numpy as np
import pandas as pd

from . import times
from .columns import NUMBERS, column, float_or_nan, id_column, int_column, is_number, new_ids
from .decode import MEMORY_EVENT, Instant, MemoryArgs, TraceDoc
from .model import empty_memory, is_sorted

_IS_INSTANT = Instant.__instancecheck__
NO_MEMORY_ARGS = MemoryArgs()
_NAME = attrgetter("name")
_TS = attrgetter("ts")


def memory_table(doc: TraceDoc, ids: "dict[str, int] | None" = None) -> pd.DataFrame:
    """The `[memory]` instants of one document as a table (model.py MEMORY_COLUMNS; rank 0 until
    `tables.assign_ranks`), in document order. An event without a finite ts, or one beyond 2^53 us
    (`times.MAX_ABS_US`), is dropped; an odd value of an arg reads as absent (-1 / NaN)."""
    insts = list(filter(_IS_INSTANT, doc.traceEvents))
    if insts:
        insts = list(compress(insts, map(eq, map(_NAME, insts), repeat(MEMORY_EVENT))))
    if not insts:
        return empty_memory()
    n = len(insts)
    try:  # every ts a finite number: one C-level pass (a Python check per event costs 3x more)
        ts = np.fromiter(map(_TS, insts), np.float64, n)
        usable = bool(times.within(ts).all())
    except (TypeError, OverflowError):
        usable = False
    if not usable:
        insts = list(compress(insts, map(is_number, map(_TS, insts))))
        ts = np.fromiter(map(_TS, insts), np.float64, len(insts))
        near = times.within(ts)
        if not near.all():  # a time that does not fit the trace (`times.fits`)
            insts, ts = list(compress(insts, near.tolist())), ts[near]
        n = len(insts)
        if not n:
            return empty_memory()
    args = [a if a is not None else NO_MEMORY_ARGS for a in map(attrgetter("args"), insts)]
    ids = new_ids() if ids is None else ids
    return memory_frame(
        id_column(insts, "pid", ids, doc.int_or_str_ids), id_column(insts, "tid", ids, doc.int_or_str_ids), ts,
        int_column(args, "device_type").astype(np.int32),
        int_column(args, "device_id"),  # int64: 2^32 never wraps onto GPU 0
        column(args, "bytes", np.float64, float_or_nan, NUMBERS),
        column(args, "total_allocated", np.float64, float_or_nan, NUMBERS),
        column(args, "total_reserved", np.float64, float_or_nan, NUMBERS),
        int_column(args, "addr"))


def memory_frame(pid, tid, ts, device_type, device, nbytes, total_allocated, total_reserved, addr) -> pd.DataFrame:
    """The memory table from its columns (rank 0 until `tables.assign_ranks`)."""
    return pd.DataFrame({
        "rank": np.zeros(len(ts), dtype=np.int32), "pid": pid, "tid": tid, "ts": ts,
        "device_type": device_type, "device": device, "bytes": nbytes,
        "total_allocated": total_allocated, "total_reserved": total_reserved, "addr": addr})


def concat_memory(tables: list[pd.DataFrame], sort: bool = True) -> pd.DataFrame:
    """Stack memory tables; sorted by (rank, ts), document order kept on ties."""
    tables = [t for t in tables if len(t)]
    if not tables:
        return empty_memory()
    out = tables[0] if len(tables) == 1 else pd.concat(tables, ignore_index=True)
    rank, ts = out["rank"].to_numpy(), out["ts"].to_numpy()
    if not sort or is_sorted(rank, ts):
        return out
    return out.iloc[np.lexsort((ts, rank))].reset_index(drop=True)
