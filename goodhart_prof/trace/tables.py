"""Typed trace structs -> the columnar events table (see model.py for the columns)."""
from __future__ import annotations

import re
from itertools import compress, repeat
from operator import attrgetter, eq, not_

import numpy as np
import pandas as pd

from . import times
from .columns import (NUMBERS, column, float_or_nan, gpu_id_column, id_column, int_column, int_id, interned,
                      is_number, new_ids, stream_from_tid)
from .decode import NO_ARGS, Complete, Metadata, TraceDoc
from .model import CATEGORY_ALIASES, GPU_ACTIVITY_CATS, KEPT_TORCH_FRAMES, NEVER_USER_FRAMES, Frames, is_sorted
from .op_labels import (CONCRETE_INPUTS, INPUT_DIMS, INPUT_TYPES, comm_args, comm_calls, comm_rows,
                        concrete_label, dims_label, is_shaped, raw_labels, type_label)

_IS_COMPLETE = Complete.__instancecheck__
_IS_METADATA = Metadata.__instancecheck__
PYTHON_CAT = "python_function"
_RANK_NAME = re.compile(r"^\s*rank\s*[-_#:]?\s*(\d{1,9})\s*$", re.IGNORECASE)


def rank_processes(doc: TraceDoc, ids: dict[str, int]) -> dict[int, int]:
    """pid -> rank from `process_name` metadata events named `rank <r>` (merged traces). `ids` is
    the document's string-id interning (`new_ids`, shared with its tables), so a string pid maps
    to the same stand-in id as in the events it names."""
    return ranks_from_names([(ev.pid, ev.args.process_name)  # filter: a C loop over a million events
                             for ev in filter(_IS_METADATA, doc.traceEvents)
                             if ev.name == "process_name" and ev.args is not None], ids)


def ranks_from_names(names: list[tuple], ids: dict[str, int]) -> dict[int, int]:
    """pid -> rank from (pid, process name) pairs whose name reads `rank <r>`."""
    found: dict[int, int] = {}
    for pid, name in names:
        match = _RANK_NAME.match(str(name or ""))
        if match:
            found[int_id(pid, ids)] = int(match.group(1))
    return found


def events_table(doc: TraceDoc, ids: "dict[str, int] | None" = None) -> tuple[pd.DataFrame, Frames, int, int]:
    """Complete events of one document as a table and its Python frames (rank 0 until
    `assign_ranks`); also the number of unusable X events skipped, and how many of those have a
    time that does not fit (`times.fits`). `ids`: the document's string-id interning (`new_ids`).

    Rows are picked with C-level loops (filter, map, compress): a Python loop over a million
    events costs more than building a column."""
    ids = new_ids() if ids is None else ids
    xs = list(filter(_IS_COMPLETE, doc.traceEvents))
    cats = interned(map(_CAT, xs), len(xs))
    frames, skipped_frames, unfit_frames = Frames.empty(), 0, 0
    if PYTHON_CAT in cats.categories:
        is_py = list(map(eq, map(_CAT, xs), repeat(PYTHON_CAT)))
        frames, skipped_frames, unfit_frames = _frames(list(compress(xs, is_py)), doc.int_or_str_ids, ids)
        # Frames are never events, even where none is kept (all torch's or the interpreter's):
        # a piece of a cut document may hold only such frames, and must read like the whole.
        xs = list(compress(xs, map(not_, is_py)))
        cats = interned(map(_CAT, xs), len(xs))
    table, skipped, unfit = _complete_table(xs, cats, doc.int_or_str_ids, ids)
    return table, frames, skipped + skipped_frames, unfit + unfit_frames


_CAT = attrgetter("cat")
_TS = attrgetter("ts")


def _timing(xs: list) -> tuple[list, np.ndarray, np.ndarray, int, "list[bool] | None", int]:
    """Usable events (finite numeric ts, start and end within `times.fits`), their ts and dur
    (missing, negative or non-finite dur -> 0), the skip count, which of `xs` were kept (None:
    all), and how many of the skipped have a time that does not fit (beyond 2^53 us)."""
    n = len(xs)
    try:
        ts = np.fromiter(map(_TS, xs), np.float64, n)
        skipped = n - int(np.isfinite(ts).sum())
    except (TypeError, OverflowError):  # a missing or non-numeric ts, or an int beyond float
        ts, skipped = None, -1
    keep = None
    if ts is None or skipped:
        keep = list(map(is_number, map(_TS, xs)))
        usable = list(compress(xs, keep))
        skipped, xs, n = n - len(usable), usable, len(usable)
        ts = np.fromiter(map(_TS, xs), np.float64, n)
    dur = column(xs, "dur", np.float64, float_or_nan, NUMBERS)
    dur[~((dur >= 0) & (dur < np.inf))] = 0.0  # missing, NaN, infinite or negative: an instant
    fit = times.fits(ts, dur)
    unfit = len(fit) - int(np.count_nonzero(fit))
    if unfit:
        at = np.flatnonzero(fit)
        xs, ts, dur, skipped = [xs[i] for i in at.tolist()], ts[at], dur[at], skipped + unfit
        fitting = iter(fit.tolist())
        keep = fit.tolist() if keep is None else [k and next(fitting) for k in keep]
    return xs, ts, dur, skipped, keep, unfit


def _args(xs: list) -> list:
    return [a if a is not None else NO_ARGS for a in map(attrgetter("args"), xs)]


def _frames(xs: list, int_or_str_ids: bool, ids: dict[str, int]) -> tuple[Frames, int, int]:
    names = list(map(attrgetter("name"), xs))
    # each distinct name tested once: a loop calls the same few hundred functions
    keep = {n: _kept_frame(n) for n in set(names)}
    xs = list(compress(xs, map(keep.__getitem__, names)))
    if not xs:
        return Frames.empty(), 0, 0
    xs, ts, dur, skipped, _, unfit = _timing(xs)
    n = len(xs)
    args = _args(xs)
    name = np.empty(n, dtype=object)
    name[:] = list(map(attrgetter("name"), xs))  # str as Kineto writes them; readers str() the odd one
    return Frames({
        "rank": np.zeros(n, dtype=np.int32),
        "pid": id_column(xs, "pid", ids, int_or_str_ids),
        "tid": id_column(xs, "tid", ids, int_or_str_ids),
        "ts": ts, "dur": dur, "end": ts + dur, "name": name,
        "python_id": int_column(args, "python_id"),
        "python_parent_id": int_column(args, "python_parent_id"),
    }), skipped, unfit


def _kept_frame(name) -> bool:
    """Whether a frame is kept: not the interpreter's or torch's own (but KEPT_TORCH_FRAMES);
    a name that is not text is kept."""
    return not (name.__class__ is str and name.startswith(NEVER_USER_FRAMES)
                and not name.startswith(KEPT_TORCH_FRAMES))


def frame_keep(names: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The frames kept (`_kept_frame`), as row indices, from name codes into `names`."""
    kept = np.fromiter(map(_kept_frame, names), bool, len(names))
    return np.flatnonzero(kept[codes])


def _complete_table(xs: list, raw_cats: pd.Categorical, int_or_str_ids: bool,
                    ids: dict[str, int]) -> tuple[pd.DataFrame, int, int]:
    xs, ts, dur, skipped, keep, unfit = _timing(xs)
    if keep is not None:  # categories in order of first appearance among the rows kept
        raw_cats = interned(map(_CAT, xs), len(xs))
    n = len(xs)
    pid = id_column(xs, "pid", ids, int_or_str_ids)
    tid = id_column(xs, "tid", ids, int_or_str_ids)
    name = interned(map(attrgetter("name"), xs), n)
    table, bad = complete_table(ts, dur, pid, tid, raw_cats, name, _StructArgs(xs))
    return table, skipped + bad, unfit


class _StructArgs:
    """The args of decoded complete events, read as `complete_table` asks (columns.py cleans them)."""

    def __init__(self, xs: list):
        self.xs, self.args = xs, _args(xs)

    def ints(self, attr: str, rows: "np.ndarray | None" = None) -> np.ndarray:
        return int_column(self.args if rows is None else self._at(rows), attr)

    def floats(self, attr: str, rows: np.ndarray) -> np.ndarray:
        return column(self._at(rows), attr, np.float64, float_or_nan, NUMBERS)

    def gpu_ids(self, attr: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return gpu_id_column(self._at(rows), attr)

    def tids(self, rows: np.ndarray) -> list:
        return [self.xs[i].tid for i in rows.tolist()]

    def raw(self, get, rows: np.ndarray, n: int, label) -> tuple[np.ndarray, pd.Index]:
        return raw_labels(self._at(rows), rows, n, get, label)

    def comm(self, rows: np.ndarray) -> tuple[np.ndarray, pd.Index]:
        return comm_args(self.args, rows)

    def _at(self, rows: np.ndarray) -> list:
        args = self.args
        return args if len(rows) == len(args) else [args[i] for i in rows.tolist()]


def canonical_categories(raw_cats: pd.Categorical) -> pd.Categorical:
    """Categories under their canonical names (`Kernel` -> `kernel`, CATEGORY_ALIASES); a trace
    holding both spellings of one gets one category for both."""
    names = [CATEGORY_ALIASES.get(c, c) for c in raw_cats.categories]
    if names == list(raw_cats.categories):
        return raw_cats
    unique = list(dict.fromkeys(names))
    if len(unique) == len(names):
        return raw_cats.rename_categories(names)
    where = {name: i for i, name in enumerate(unique)}
    to_new = np.array([where[name] for name in names] + [-1], dtype=np.int64)  # code -1 stays -1
    return pd.Categorical.from_codes(to_new[np.asarray(raw_cats.codes, dtype=np.int64)], unique)


def complete_table(ts: np.ndarray, dur: np.ndarray, pid: np.ndarray, tid: np.ndarray, raw_cats: pd.Categorical,
                   name: pd.Categorical, args) -> tuple[pd.DataFrame, int]:
    """The events table of usable complete events (times checked, ids mapped, names interned)
    and how many were dropped as malformed (a GPU id no int64 holds, or a negative one). `args`
    reads their args: `_StructArgs` (decoded structs) or columnar.NativeArgs (the native decoder)."""
    n = len(ts)
    cat = canonical_categories(raw_cats)
    external = args.ints("external_id")
    lacking = np.flatnonzero(external < 0)
    if len(lacking):  # 2021 GPU events spell it "external id"
        external[lacking] = args.ints("external_id_2021", lacking)
    # device, stream and bytes only mean something on GPU rows (Kineto writes them nowhere
    # else): read there only (-1 / NaN elsewhere).
    gpu_rows = np.flatnonzero(np.asarray(cat.isin(GPU_ACTIVITY_CATS)))
    device = np.full(n, -1, dtype=np.int64)
    stream = np.full(n, -1, dtype=np.int64)
    nbytes = np.full(n, np.nan)
    bad_ids = None
    skipped = 0
    if len(gpu_rows):
        nbytes[gpu_rows] = args.floats("bytes", gpu_rows)
        gpu_stream, bad_stream = args.gpu_ids("stream", gpu_rows)
        gpu_device, bad_device = args.gpu_ids("device", gpu_rows)
        if bad_stream.any() or bad_device.any():
            bad_ids = gpu_rows[bad_stream | bad_device]
        # 2021 traces name GPU threads "stream 7" and ROCm writes streams as hex strings.
        missing = np.flatnonzero(gpu_stream < 0)
        if len(missing):
            gpu_stream[missing] = [stream_from_tid(t) for t in args.tids(gpu_rows[missing])]
        stream[gpu_rows] = gpu_stream
        device[gpu_rows] = np.where(gpu_device < 0, pid[gpu_rows], gpu_device)
    # what a cuda_sync event waits on (Stream Wait Event, Event Sync): read on those rows only,
    # as int32 (Kineto writes both as int32; 8 bytes an event, not 16)
    wait_on_stream = np.full(n, -1, dtype=np.int32)
    wait_on_correlation = np.full(n, -1, dtype=np.int32)
    sync_rows = np.flatnonzero(np.asarray(cat == "cuda_sync"))
    if len(sync_rows):
        wait_on_stream[sync_rows] = _int32(args.ints("wait_on_stream", sync_rows))
        wait_on_correlation[sync_rows] = _int32(args.ints("wait_on_correlation", sync_rows))
    is_op = np.asarray(cat == "cpu_op")
    op_rows = np.flatnonzero(is_op)
    # `nccl:*` annotations record the collective's tensor (shape and type) where
    # record_param_comms records no size (2023-era c10d): typed and shaped like the ops.
    is_call = np.zeros(n, dtype=bool)
    is_call[comm_calls(name, cat)] = True
    typed_rows = op_rows if not (is_call & ~is_op).any() else np.flatnonzero(is_op | is_call)
    type_codes, type_labels = args.raw(INPUT_TYPES, typed_rows, n, type_label)
    shaped_rows = typed_rows[is_shaped(name, typed_rows) | is_call[typed_rows]]
    # every op's sizes (slow_tiny_ops judges ops on tiny inputs); scalars only for SHAPED_OPS
    dims_codes, dims_labels = args.raw(INPUT_DIMS, typed_rows, n, dims_label)
    concrete_codes, concrete_labels = args.raw(CONCRETE_INPUTS, shaped_rows, n, concrete_label)
    flops = np.full(n, np.nan)
    if len(op_rows):
        flops[op_rows] = args.floats("flops", op_rows)
    comm_codes, comm_labels = args.comm(comm_rows(name, cat))
    columns = {"pid": pid, "tid": tid, "ts": ts, "dur": dur, "name": name, "cat": cat,
               "device": device, "stream": stream, "correlation": args.ints("correlation"),
               "external_id": external, "bytes": nbytes, "input_types": type_codes,
               "comm_args": comm_codes, "input_dims": dims_codes, "concrete_inputs": concrete_codes,
               "flops": flops, "wait_on_stream": wait_on_stream, "wait_on_correlation": wait_on_correlation}
    if bad_ids is not None:  # a device or stream id no int64 holds, or a negative one: malformed
        keep_rows = np.ones(n, dtype=bool)
        keep_rows[bad_ids] = False
        columns = {k: v[keep_rows] for k, v in columns.items()}
        skipped += len(bad_ids)
        n, ts = int(keep_rows.sum()), columns["ts"]
    if n > 1 and not (ts[1:] >= ts[:-1]).all():  # by start (Kineto writes GPU events last)
        order = np.argsort(ts, kind="stable")
        columns = {k: v[order] for k, v in columns.items()}
    c = columns
    table = pd.DataFrame({
        "rank": np.zeros(n, dtype=np.int32), "pid": c["pid"], "tid": c["tid"], "ts": c["ts"],
        "dur": c["dur"], "end": c["ts"] + c["dur"], "name": c["name"], "cat": c["cat"],
        "device": c["device"], "stream": c["stream"], "correlation": c["correlation"],
        "external_id": c["external_id"], "bytes": c["bytes"],
        "input_types": pd.Categorical.from_codes(c["input_types"], categories=type_labels,
                                                 validate=False),
        "comm_args": pd.Categorical.from_codes(c["comm_args"], categories=comm_labels,
                                               validate=False),
        "input_dims": pd.Categorical.from_codes(c["input_dims"], categories=dims_labels,
                                                validate=False),
        "concrete_inputs": pd.Categorical.from_codes(c["concrete_inputs"], categories=concrete_labels,
                                                     validate=False),
        "flops": c["flops"], "wait_on_stream": c["wait_on_stream"],
        "wait_on_correlation": c["wait_on_correlation"]},
        copy=False)  # new arrays each: kept as they are, not stacked into blocks (~4 ms for 123k events)
    return table, skipped


def _int32(values: np.ndarray) -> np.ndarray:
    """int64 values as int32, those beyond it -1 (as absent)."""
    return np.where((values >= -1) & (values <= np.iinfo(np.int32).max), values, -1).astype(np.int32)


def assign_ranks(table: pd.DataFrame, frames: Frames, pid_rank: dict[int, int], default_rank: int,
                 memory: "pd.DataFrame | None" = None) -> None:
    """Set the rank columns (of the memory table too): by pid for merged traces (`rank <r>`
    processes), else one rank."""
    if pid_rank:
        table["rank"] = table["pid"].map(pid_rank).fillna(default_rank).to_numpy(dtype=np.int32)
        frames.columns["rank"] = pd.Series(frames["pid"]).map(pid_rank).fillna(
            default_rank).to_numpy(dtype=np.int32)
    else:
        table["rank"] = np.int32(default_rank)
        frames.columns["rank"][:] = default_rank
    if memory is not None and len(memory):
        memory["rank"] = (pd.Series(memory["pid"]).map(pid_rank).fillna(default_rank).to_numpy(dtype=np.int32)
                          if pid_rank else np.int32(default_rank))


def concat_tables(tables: list[pd.DataFrame], sort: bool = True) -> pd.DataFrame:
    """Stack tables; categories are unioned so names stay interned. Sorted by (rank, ts)."""
    tables = [t for t in tables if len(t)] or tables[:1]  # an empty table's categories have no dtype
    if len(tables) == 1:
        out = tables[0]
    else:
        from pandas.api.types import union_categoricals
        categorical = ("name", "cat", "input_types", "comm_args", "input_dims", "concrete_inputs")
        cats = {c: _same_label_type(union_categoricals([t[c] for t in tables]), [t[c] for t in tables])
                for c in categorical}
        out = pd.concat([t.drop(columns=list(categorical)) for t in tables], ignore_index=True)
        for c, values in cats.items():
            out[c] = values
        out = out[tables[0].columns]
    rank, ts = out["rank"].to_numpy(), out["ts"].to_numpy()
    if not sort or is_sorted(rank, ts):
        return out
    return out.iloc[np.lexsort((ts, rank))].reset_index(drop=True)


def _same_label_type(values: pd.Categorical, parts: list) -> pd.Categorical:
    """`values` with its categories typed as the parts' (union_categoricals makes text labels
    `str`; the raw-arg columns hold `object` labels): a table loaded in pieces equals the table of
    one piece."""
    kinds = {p.cat.categories.dtype for p in parts if len(p.cat.categories)}
    if len(kinds) != 1 or values.categories.dtype == (kind := kinds.pop()):
        return values
    return pd.Categorical.from_codes(values.codes, categories=pd.Index(values.categories, dtype=kind),
                                     validate=False)
