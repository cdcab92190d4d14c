"""The native decoder's columns -> the tables of a piece, equal to what decode.py + tables.py give.

`native/columnar.c` (yyjson and one C pass, built by setup.py when a C compiler is there) reads a
JSON array of events into columns: numbers cleaned as columns.py cleans them, names and
categories interned, the raw `Input ...` args interned by value. It returns None for anything
the typed msgspec decode would treat in a way of its own (an unknown phase, an odd type, a
duplicated field, a bignum, deep nesting, bytes that are not JSON); `events_tables` and
`document_tables` then return None too and the caller takes the msgspec path, which gives the
same tables or the error. Without the extension (no compiler; another Python on the GPU image)
`AVAILABLE` is False and only the msgspec path runs. `GOODHART_PROF_NATIVE=0` turns it off.

The tables are then finished by the same code as the msgspec path's (`tables.complete_table`,
`columns.categorical_of`, `op_labels.label_codes`, `memory_table.memory_frame`), so the two
paths differ only in how values are read (tests/trace/test_columnar.py compares them on every
fixture trace and on the broken corpus).
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from . import times
from .columns import NUMBERS, parse_int, categorical_of, float_or_nan, int_id, recode, values_column
from .decode import DecodeError, TraceDoc, decode
from .frame import events_end, events_start
from .memory_table import memory_frame
from .model import Frames, empty_memory
from .piece_tables import Piece
from .op_labels import CONCRETE_INPUTS, INPUT_DIMS, INPUT_TYPES, comm_args_of, label_codes
from .pieces import check_frame, find_cut, head_doc, merge_headers, tail_doc
from .tables import complete_table, frame_keep, ranks_from_names

try:
    from . import cdecoder as _columnar
except ImportError:  # not built here (no compiler), or built for another Python
    _columnar = None

AVAILABLE = _columnar is not None and os.environ.get("GOODHART_PROF_NATIVE", "1") != "0"
_BOM = b"\xef\xbb\xbf"
_RAW_KEYS = {INPUT_TYPES: "input_types", INPUT_DIMS: "input_dims", CONCRETE_INPUTS: "concrete_inputs"}


def events_tables(raw) -> "Piece | None":
    """A piece `[event, ...]` of an events array, or None (the msgspec path reads it)."""
    if not AVAILABLE:
        return None
    inside = _inside(raw)
    if inside is None:
        return None
    cols = _events(raw, *inside)
    if cols is None:
        return None
    return tables(cols, merge_headers([]))


def document_tables(raw) -> "Piece | None":
    """A whole document: its head and tail (the fields around the events) by the msgspec
    decoder, its events array natively; None when it cannot be split that cheaply or any part
    is not plain (the whole-document decode then reads it, with its errors and leniency)."""
    if not AVAILABLE or raw[:3] == _BOM:
        return None
    start = events_start(raw)
    end = events_end(raw, start - 1) if start is not None else None
    if end is None:
        return None
    head, tail = bytes(head_doc(raw, start)), bytes(tail_doc(raw, end))
    try:
        check_frame(head, tail)
        head_fields, tail_fields = decode(head)[0], decode(tail)[0]
    except DecodeError:
        return None
    cols = _events(raw, start, end)
    if cols is None:
        return None
    return tables(cols, merge_headers([head_fields, tail_fields]))


_SPACE = b" \t\r\n"


def _inside(raw) -> "tuple[int, int] | None":
    """(lo, hi) of what lies between a piece's `[` and `]`, or None."""
    lo, hi = 0, len(raw)
    while lo < hi and raw[lo] in _SPACE:
        lo += 1
    while hi > lo and raw[hi - 1] in _SPACE:
        hi -= 1
    if hi - lo < 2 or raw[lo] != 0x5B or raw[hi - 1] != 0x5D:  # [ ]
        return None
    return lo + 1, hi - 1


KEEP_BYTES = 256 << 20  # arena memory kept for the next load (diff loads two traces; notebooks many)


def release(keep: int = KEEP_BYTES) -> None:
    """Give back the memory the native decoder keeps between parses, but `keep` bytes of it (a
    load calls it when done: the V100 trace's next load 0.20 -> 0.14 s, its pages already
    there), on a thread of its own: unmapping a few hundred MB takes ~10 ms, which the analysis
    need not wait for."""
    if _columnar is not None:
        threading.Thread(target=_columnar.release, args=(keep,), name="goodhart-prof-release", daemon=True).start()


def parse(raw, lo: int, hi: int) -> "dict | None":
    """The columns of the events raw[lo:hi] in one pass on this thread, or None."""
    cols = _columnar.events(raw, lo, hi)
    return cols if cols is not None and cols["events"] else None


def _events(raw, lo: int, hi: int) -> "dict | None":
    """The columns of the events raw[lo:hi]; above PARALLEL_BYTES, in two halves cut between
    events and parsed at once on two threads (the parse runs without the GIL), then joined."""
    if hi - lo < PARALLEL_BYTES or (os.cpu_count() or 1) < 2:
        cols = _columnar.events(raw, lo, hi)
    else:
        cut = find_cut(raw, lo + (hi - lo) // 2, hi)
        if cut is None:
            cols = _columnar.events(raw, lo, hi)
        else:
            with ThreadPoolExecutor(1) as pool:
                second = pool.submit(_columnar.events, raw, cut[1], hi)
                first = _columnar.events(raw, lo, cut[0] + 1)
                second = second.result()
            # a cut inside a value makes a half fail: then the whole range at once
            cols = join(first, second) if first is not None and second is not None else _columnar.events(raw, lo, hi)
    return cols if cols is not None and cols["events"] else None


PARALLEL_BYTES = 16 << 20  # below this, a second thread costs more than it saves


def join(*parts: dict) -> dict:
    """The columns of consecutive ranges as one: each later part's codes mapped into the first
    part's label lists (extended by its new labels, so first appearance is kept), its rows
    shifted past those before it; every buffer copied once."""
    a = parts[0]
    out = {"events": sum(p["events"] for p in parts), "comm": list(a["comm"]),
           "process_names": [n for p in parts for n in p["process_names"]]}
    maps: list[dict] = [{} for _ in parts]
    for key in ("cat_labels", "name_labels", "raw_labels"):
        labels = list(a[key])
        index = {v: i for i, v in enumerate(labels)}
        for k, b in enumerate(parts[1:], 1):
            mapped = []
            for v in b[key]:
                at = index.get(v)
                if at is None:
                    at = index[v] = len(labels)
                    labels.append(v)
                mapped.append(at)
            maps[k][key] = np.array(mapped + [-1], dtype=np.int32)  # a code -1 (absent) maps to -1
        out[key] = labels
    coded = {"cat": "cat_labels", "name": "name_labels", "input_types": "raw_labels",
             "input_dims": "raw_labels", "concrete_inputs": "raw_labels"}
    for group in ("complete", "frames", "memory"):
        before = np.cumsum([0] + [len(p[group]["ts"]) // 8 for p in parts]).tolist()  # rows before each part
        joined = {}
        for col in a[group]:
            if col == "odd_ids":
                joined[col] = [(r + before[k], x, y) for k, p in enumerate(parts) for r, x, y in p[group][col]]
            elif col == "odd_args":
                joined[col] = [(r + before[k], x, v) for k, p in enumerate(parts) for r, x, v in p[group][col]]
            elif col in coded:
                joined[col] = bytearray().join(  # the first part's codes as they are
                    [a[group][col]] + [maps[k][coded[col]][np.frombuffer(p[group][col], np.int32)].tobytes()
                                       for k, p in enumerate(parts) if k])
            else:
                joined[col] = bytearray().join(p[group][col] for p in parts)
        out[group] = joined
        if group == "complete":
            out["comm"] += [(t[0] + before[k],) + tuple(t[1:]) for k, p in enumerate(parts) if k for t in p["comm"]]
    return out

def tables(cols: dict, header: TraceDoc) -> Piece:
    """The tables of a piece from its columns (`parse`) and its header fields."""
    ids: dict[str, int] = {}
    names = np.empty(len(cols["name_labels"]), dtype=object)
    names[:] = cols["name_labels"]
    table, skipped, unfit = _complete(cols["complete"], cols, names, ids)
    frames, frame_skipped, frame_unfit = _frames(cols["frames"], names, ids)
    pid_rank = ranks_from_names(cols["process_names"], ids)
    return Piece(table, frames, pid_rank, header, skipped + frame_skipped, _memory(cols["memory"], ids),
                        unfit + frame_unfit, cols["events"])


def _ids(c: dict, ids: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """pid and tid as int64: ints as read, the odd ones (text, None, beyond int64) by int_id."""
    pid, tid = np.frombuffer(c["pid"], np.int64), np.frombuffer(c["tid"], np.int64)
    for row, p, t in c["odd_ids"]:
        if p is not False:
            pid[row] = int_id(p, ids)
        if t is not False:
            tid[row] = int_id(t, ids)
    return pid, tid


_INT_COLUMN = (np.int64, parse_int, (int,))   # columns.int_column's rules
_FLOAT_COLUMN = (np.float64, float_or_nan, NUMBERS)
MEMORY_ABSENT = np.iinfo(np.int64).min  # columnar.c: a `[memory]` int arg that is absent


def _read(c: dict, key: str, at: np.ndarray, kind: tuple, absent=None) -> np.ndarray:
    """Column `key` of the rows `at`. Where the decoder set values aside (odd_args: text, null,
    a boolean, a float in an int column), the column is read as columns.column reads the
    decoded values, from the same Python values (`absent`: what an absent int arg was there)."""
    dtype, clean, good = kind
    values = np.frombuffer(c[key], dtype)[at]
    fix = {row: v for row, col, v in c["odd_args"] if col == key} if c["odd_args"] else None
    rows = at.tolist() if fix else []
    hit = [i for i, r in enumerate(rows) if r in fix]
    if absent is not None:
        gone = values == MEMORY_ABSENT
        if not hit:
            values[gone] = -1
            return values
        items = [None if g else v for v, g in zip(values.tolist(), gone.tolist())]
    elif not hit:
        return values
    else:
        items = values.tolist()
    for i in hit:
        items[i] = fix[rows[i]]
    return values_column(items, dtype, clean, good)


def _usable(ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """As tables._timing: rows with a numeric ts (NaN here: absent or null) whose start and end
    fit (times.fits); dur absent, null or negative -> 0. (rows, dur, skipped, unfit)."""
    numeric = ~np.isnan(ts)
    dur = dur.copy()
    dur[~((dur >= 0) & (dur < np.inf))] = 0.0
    fit = times.fits(ts, dur)
    unfit = int(np.count_nonzero(numeric & ~fit))
    rows = np.flatnonzero(numeric & fit)
    return rows, dur, len(ts) - len(rows), unfit


def _complete(c: dict, cols: dict, names: np.ndarray, ids: dict[str, int]) -> tuple[pd.DataFrame, int, int]:
    ts_all = np.frombuffer(c["ts"], np.float64)
    rows, dur, skipped, unfit = _usable(ts_all, np.frombuffer(c["dur"], np.float64))
    pid, tid = _ids(c, ids)
    odd_tid = {row: t for row, _, t in c["odd_ids"] if t is not False}
    cat_codes, cat_first = recode(np.frombuffer(c["cat"], np.int32)[rows])
    name_codes, name_first = recode(np.frombuffer(c["name"], np.int32)[rows])
    labels = cols["cat_labels"]
    raw_cats = categorical_of([labels[i] for i in cat_first.tolist()], cat_codes)
    name = categorical_of(names[name_first].tolist(), name_codes)
    table, bad = complete_table(ts_all[rows], dur[rows], pid[rows], tid[rows], raw_cats, name,
                                NativeArgs(c, rows, tid, odd_tid, cols))
    return table, skipped + bad, unfit


class NativeArgs:
    """The args columns of the native decoder, for `tables.complete_table` (rows: the kept ones)."""

    def __init__(self, c: dict, rows: np.ndarray, tid: np.ndarray, odd_tid: dict, cols: dict):
        self.c, self.rows, self.tid, self.odd_tid = c, rows, tid, odd_tid
        self.raw_values, self.comm_rows = cols["raw_labels"], cols["comm"]

    def _col(self, attr: str, dtype, rows: "np.ndarray | None" = None) -> np.ndarray:
        at = self.rows if rows is None else self.rows[rows]
        return np.frombuffer(self.c[attr], dtype)[at]

    def ints(self, attr: str, rows: "np.ndarray | None" = None) -> np.ndarray:
        return _read(self.c, attr, self.rows if rows is None else self.rows[rows], _INT_COLUMN)

    def floats(self, attr: str, rows: np.ndarray) -> np.ndarray:
        return _read(self.c, attr, self.rows[rows], _FLOAT_COLUMN)

    def gpu_ids(self, attr: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        values = self._col(attr, np.int64, rows)
        return values, values == -2  # columns.BAD_ID

    def tids(self, rows: np.ndarray) -> list:
        at = self.rows[rows].tolist()
        return [self.odd_tid[r] if r in self.odd_tid else int(self.tid[r]) for r in at]

    def raw(self, get, rows: np.ndarray, n: int, label) -> tuple[np.ndarray, pd.Index]:
        key = _RAW_KEYS[get]
        return label_codes(self._col(key, np.int32, rows), rows, n, self.raw_values, label)

    def comm(self, rows: np.ndarray) -> tuple[np.ndarray, pd.Index]:
        by_row = {t[0]: t[1:] for t in self.comm_rows}
        at = self.rows[rows].tolist()
        blank = (None,) * 6
        picked = [by_row.get(r, blank) for r in at]
        return comm_args_of(len(self.rows), rows, [list(f) for f in zip(*picked)] if picked else [[]] * 6)


def _frames(c: dict, names: np.ndarray, ids: dict[str, int]) -> tuple[Frames, int, int]:
    codes = np.frombuffer(c["name"], np.int32)
    if not len(codes):
        return Frames.empty(), 0, 0
    kept_names = frame_keep(names, codes)
    if not len(kept_names):
        return Frames.empty(), 0, 0
    rows, dur, skipped, unfit = _usable(np.frombuffer(c["ts"], np.float64)[kept_names],
                                        np.frombuffer(c["dur"], np.float64)[kept_names])
    at = kept_names[rows]
    ts = np.frombuffer(c["ts"], np.float64)[at]
    dur = dur[rows]
    pid, tid = _ids(c, ids)
    n = len(at)
    name = np.empty(n, dtype=object)
    name[:] = names[codes[at]]
    return Frames({
        "rank": np.zeros(n, dtype=np.int32), "pid": pid[at], "tid": tid[at],
        "ts": ts, "dur": dur, "end": ts + dur, "name": name,
        "python_id": _read(c, "python_id", at, _INT_COLUMN),
        "python_parent_id": _read(c, "python_parent_id", at, _INT_COLUMN),
    }), skipped, unfit


def _memory(c: dict, ids: dict[str, int]) -> pd.DataFrame:
    ts = np.frombuffer(c["ts"], np.float64)
    if not len(ts):
        return empty_memory()
    at = np.flatnonzero(times.within(ts))
    if not len(at):
        return empty_memory()
    pid, tid = _ids(c, ids)
    col = {k: _read(c, k, at, _INT_COLUMN, absent=True) for k in ("device_type", "device", "addr")}
    col.update({k: _read(c, k, at, _FLOAT_COLUMN) for k in ("bytes", "total_allocated", "total_reserved")})
    return memory_frame(pid[at], tid[at], ts[at], col["device_type"].astype(np.int32), col["device"], col["bytes"],
                        col["total_allocated"], col["total_reserved"], col["addr"])


__all__ = ["AVAILABLE", "Piece", "events_tables", "document_tables", "parse", "tables", "join", "release"]
