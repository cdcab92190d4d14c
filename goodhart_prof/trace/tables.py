"""Typed trace structs -> the columnar events table (see model.py for the columns)."""
from __future__ import annotations

import hashlib
import math
from typing import Iterable
import re
from itertools import compress, count, islice, repeat
from operator import attrgetter, eq, is_not, not_

import msgspec
import numpy as np
import pandas as pd

from . import times
from .decode import MEMORY_EVENT, NO_ARGS, Complete, Instant, MemoryArgs, Metadata, TraceDoc
from .model import (CATEGORY_ALIASES, GPU_ACTIVITY_CATS, MEMORY_COLUMNS, NEVER_USER_FRAMES, SHAPED_OPS,
                    Frames, is_sorted)

_IS_COMPLETE = Complete.__instancecheck__
_IS_METADATA = Metadata.__instancecheck__
PYTHON_CAT = "python_function"
_RANK_NAME = re.compile(r"^\s*rank\s*[-_#:]?\s*(\d{1,9})\s*$", re.IGNORECASE)
_STREAM_TID = re.compile(r"stream\s*(\d{1,9})\b", re.IGNORECASE)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def rank_processes(doc: TraceDoc, ids: dict[str, int]) -> dict[int, int]:
    """pid -> rank from `process_name` metadata events named `rank <r>` (merged traces). `ids` is
    the document's string-id interning (`new_ids`, shared with its tables), so a string pid maps
    to the same stand-in id as in the events it names."""
    found: dict[int, int] = {}
    for ev in filter(_IS_METADATA, doc.traceEvents):  # filter: a C loop over a million events
        if ev.name == "process_name" and ev.args is not None:
            match = _RANK_NAME.match(str(ev.args.process_name or ""))
            if match:
                found[_int_id(ev.pid, ids)] = int(match.group(1))
    return found


def new_ids() -> dict[str, int]:
    """The string-id interning of one document: its events, frames, memory events and process
    names all take their stand-in ids from it, so one pid has one id across them."""
    return {}


def _int_id(value, names: dict[str, int]) -> int:
    """Ints stay; numeric strings become ints; other values (and ints beyond int64) get a
    negative id made from their text (`text_id`), the same in every piece, table and file of a
    load whatever the order they come in; `names` caches them."""
    if value.__class__ is int and INT64_MIN <= value <= INT64_MAX:
        return value
    if value is None:
        return -1
    text = str(value)
    if value.__class__ is str:  # read as int() reads it (as numpy does in `_id_column`)
        try:
            number = int(text)
        except ValueError:
            number = None
        if number is not None and INT64_MIN <= number <= INT64_MAX:
            return number
    found = names.get(text)
    if found is None:
        found = names[text] = text_id(text)
    return found


def text_id(text: str) -> int:
    """The stand-in id of a pid or tid that is not a number: -2 less 48 bits of a hash of its
    text (blake2b: stable across processes, unlike `hash`), so ids never depend on where a file
    was cut (two texts share one with odds of 1 in 10^14 per pair)."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=6).digest()
    return -2 - int.from_bytes(digest, "little")


def _parse_int(v) -> int:
    if v.__class__ is int:
        return v if INT64_MIN <= v <= INT64_MAX else -1
    if v.__class__ is str and v.isascii() and v.isdigit() and len(v) < 19:  # "²" is a digit to isdigit
        return int(v)
    if v.__class__ is float and v.is_integer() and -2.0**63 <= v < 2.0**63:  # NaN, inf: not integers
        return int(v)
    return -1


def _column(items: list, attr: str, dtype, clean, good_class) -> np.ndarray:
    """A numeric column of one attribute: fast when every value already has the right type;
    otherwise only the odd values (nulls, a stray string pid) go through `clean`, so a handful of
    them does not slow a million rows."""
    get = attrgetter(attr)
    try:
        return np.fromiter(map(get, items), dtype, len(items))
    except (TypeError, ValueError, OverflowError):
        values = list(map(get, items))
    odd = [i for i, v in enumerate(values) if v.__class__ not in good_class]
    for i in odd:
        values[i] = clean(values[i])
    try:
        return np.fromiter(values, dtype, len(values))
    except (TypeError, ValueError, OverflowError):  # a number beyond the column's range
        return np.fromiter(map(clean, values), dtype, len(values))


_INT = (int,)
_NUM = (int, float)


def _int_column(items: list, attr: str) -> np.ndarray:
    return _column(items, attr, np.int64, _parse_int, _INT)


def _float_or_nan(v) -> float:
    return float(v) if _number(v) else np.nan


def _interned(values: Iterable, n: int) -> pd.Categorical:
    """`n` strings -> categorical (names are interned once, rows hold codes), categories in
    order of first appearance. A dict does it at C speed: each value maps to the row where it
    first appeared (`setdefault` with a running count), and those rows, increasing, are turned
    into dense codes by one searchsorted; 3x faster than pd.factorize on str objects."""
    index: dict = {}
    first = np.fromiter(map(index.setdefault, values, count()), np.int64, n)
    codes = np.searchsorted(np.fromiter(index.values(), np.int64, len(index)), first).astype(np.int32)
    labels = [u if u.__class__ is str else ("" if u is None else str(u)) for u in index]
    if len(set(labels)) != len(labels):  # e.g. the name 7 and the name "7": merge them
        return pd.Categorical(labels, categories=sorted(set(labels)))[codes]
    return pd.Categorical.from_codes(codes, categories=labels, validate=False)


def _number(v) -> bool:
    """A finite int or float (NaN, infinities and ints beyond float's range are not)."""
    if v.__class__ not in _NUM:
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def events_table(doc: TraceDoc, ids: "dict[str, int] | None" = None) -> tuple[pd.DataFrame, Frames, int, int]:
    """Complete events of one document as a table and its Python frames (rank 0 until
    `assign_ranks`); also the number of unusable X events skipped, and how many of those have a
    time that does not fit (`times.fits`). `ids`: the document's string-id interning (`new_ids`).

    Rows are picked with C-level loops (filter, map, compress): a Python loop over a million
    events costs more than building a column."""
    ids = new_ids() if ids is None else ids
    xs = list(filter(_IS_COMPLETE, doc.traceEvents))
    cats = _interned(map(_CAT, xs), len(xs))
    frames, skipped_frames, unfit_frames = Frames.empty(), 0, 0
    if PYTHON_CAT in cats.categories:
        is_py = list(map(eq, map(_CAT, xs), repeat(PYTHON_CAT)))
        frames, skipped_frames, unfit_frames = _frames(list(compress(xs, is_py)), doc.int_or_str_ids, ids)
        if len(frames):
            xs = list(compress(xs, map(not_, is_py)))
            cats = _interned(map(_CAT, xs), len(xs))
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
        keep = list(map(_number, map(_TS, xs)))
        usable = list(compress(xs, keep))
        skipped, xs, n = n - len(usable), usable, len(usable)
        ts = np.fromiter(map(_TS, xs), np.float64, n)
    dur = _column(xs, "dur", np.float64, _float_or_nan, _NUM)
    dur[~((dur >= 0) & (dur < np.inf))] = 0.0  # missing, NaN, infinite or negative: an instant
    fit = times.fits(ts, dur)
    unfit = len(fit) - int(np.count_nonzero(fit))
    if unfit:
        at = np.flatnonzero(fit)
        xs, ts, dur, skipped = [xs[i] for i in at.tolist()], ts[at], dur[at], skipped + unfit
        fitting = iter(fit.tolist())
        keep = fit.tolist() if keep is None else [k and next(fitting) for k in keep]
    return xs, ts, dur, skipped, keep, unfit


def _id_column(items: list, attr: str, names: dict[str, int], int_or_str: bool = False) -> np.ndarray:
    """pid or tid as int64 (`_int_id`). Kineto writes ints everywhere but in its `Trace` span,
    the last complete event (pid "Spans"): the run of values before that odd tail is converted
    at C speed, and only the tail goes through `_int_id`. When the decoder guarantees ints,
    strings or None (`int_or_str`), numpy's conversion of the run agrees with `_int_id` whenever
    it succeeds (it reads strings as int() does, and refuses None and numbers beyond int64);
    otherwise the run is first checked with one C-level `sum` (a float in it makes the sum a
    float; a string or None raises). Failing both, the few distinct values are mapped once
    through a dict instead of checking every row in Python."""
    get = attrgetter(attr)
    n = len(items)
    head = n
    while head and n - head < _ODD_TAIL and get(items[head - 1]).__class__ is not int:
        head -= 1
    if int_or_str:
        try:
            out = np.empty(n, dtype=np.int64)
            out[:head] = np.fromiter(map(get, islice(items, head)), np.int64, head)
            out[head:] = [_int_id(get(e), names) for e in items[head:]]
            return out
        except (TypeError, ValueError, OverflowError):  # odd values inside the run
            pass
    values = list(map(get, items))
    try:
        if sum(islice(values, head)).__class__ is int:
            out = np.empty(n, dtype=np.int64)
            out[:head] = np.fromiter(islice(values, head), np.int64, head)
            out[head:] = [_int_id(v, names) for v in values[head:]]
            return out
    except (TypeError, OverflowError):  # odd values inside, or an int beyond int64
        pass
    kinds = set(map(type, values))
    if bool in kinds or float in kinds:  # dict keys would merge them with ints (1 == 1.0 == True)
        return np.fromiter([_int_id(v, names) for v in values], np.int64, len(values))
    mapping = {v: _int_id(v, names) for v in dict.fromkeys(values)}
    return np.fromiter(map(mapping.__getitem__, values), np.int64, len(values))


_ODD_TAIL = 16  # at most this many trailing non-int ids take the fast path


def _args(xs: list) -> list:
    return [a if a is not None else NO_ARGS for a in map(attrgetter("args"), xs)]


def _frames(xs: list, int_or_str_ids: bool, ids: dict[str, int]) -> tuple[Frames, int, int]:
    names = list(map(attrgetter("name"), xs))
    try:
        xs = [e for e, n in zip(xs, names) if not n.startswith(NEVER_USER_FRAMES)]
    except AttributeError:  # a name that is not a string: keep those frames
        xs = [e for e, n in zip(xs, names) if not (isinstance(n, str) and n.startswith(NEVER_USER_FRAMES))]
    if not xs:
        return Frames.empty(), 0, 0
    xs, ts, dur, skipped, _, unfit = _timing(xs)
    n = len(xs)
    args = _args(xs)
    name = np.empty(n, dtype=object)
    name[:] = list(map(attrgetter("name"), xs))  # str as Kineto writes them; readers str() the odd one
    return Frames({
        "rank": np.zeros(n, dtype=np.int32),
        "pid": _id_column(xs, "pid", ids, int_or_str_ids),
        "tid": _id_column(xs, "tid", ids, int_or_str_ids),
        "ts": ts, "dur": dur, "end": ts + dur, "name": name,
        "python_id": _int_column(args, "python_id"),
        "python_parent_id": _int_column(args, "python_parent_id"),
    }), skipped, unfit


def _complete_table(xs: list, raw_cats: pd.Categorical, int_or_str_ids: bool,
                    ids: dict[str, int]) -> tuple[pd.DataFrame, int, int]:
    xs, ts, dur, skipped, keep, unfit = _timing(xs)
    if keep is not None:  # categories in order of first appearance among the rows kept
        raw_cats = _interned(map(_CAT, xs), len(xs))
    n = len(xs)
    pid = _id_column(xs, "pid", ids, int_or_str_ids)
    tid = _id_column(xs, "tid", ids, int_or_str_ids)
    cat = raw_cats.rename_categories([CATEGORY_ALIASES.get(c, c) for c in raw_cats.categories]) \
        if any(c in CATEGORY_ALIASES for c in raw_cats.categories) else raw_cats
    name = _interned(map(attrgetter("name"), xs), n)
    args = _args(xs)
    external = _int_column(args, "external_id")
    lacking = np.flatnonzero(external < 0)
    if len(lacking):  # 2021 GPU events spell it "external id"
        external[lacking] = _int_column([args[i] for i in lacking.tolist()], "external_id_2021")
    # device, stream and bytes only mean something on GPU rows (Kineto writes them nowhere
    # else): read there only (-1 / NaN elsewhere).
    gpu_rows = np.flatnonzero(np.asarray(cat.isin(GPU_ACTIVITY_CATS)))
    device = np.full(n, -1, dtype=np.int64)
    stream = np.full(n, -1, dtype=np.int64)
    nbytes = np.full(n, np.nan)
    bad_ids = None
    if len(gpu_rows):
        gpu_args = [args[i] for i in gpu_rows.tolist()]
        nbytes[gpu_rows] = _column(gpu_args, "bytes", np.float64, _float_or_nan, _NUM)
        gpu_stream, bad_stream = _gpu_id_column(gpu_args, "stream")
        gpu_device, bad_device = _gpu_id_column(gpu_args, "device")
        if bad_stream.any() or bad_device.any():
            bad_ids = gpu_rows[bad_stream | bad_device]
        # 2021 traces name GPU threads "stream 7" and ROCm writes streams as hex strings.
        missing = np.flatnonzero(gpu_stream < 0)
        if len(missing):
            gpu_stream[missing] = [_stream_from_tid(xs[i].tid) for i in gpu_rows[missing].tolist()]
        stream[gpu_rows] = gpu_stream
        device[gpu_rows] = np.where(gpu_device < 0, pid[gpu_rows], gpu_device)
    op_rows = np.flatnonzero(np.asarray(cat == "cpu_op"))
    op_args = [args[i] for i in op_rows.tolist()]
    # `nccl:*` annotations record the collective's tensor (shape and type) where
    # record_param_comms records no size (2023-era c10d): typed and shaped like the ops.
    calls = _comm_calls(name, cat)
    typed_rows = np.union1d(op_rows, calls)
    typed_args = op_args if len(typed_rows) == len(op_rows) else [args[i] for i in typed_rows.tolist()]
    type_codes, type_labels = _raw_labels(typed_args, typed_rows, n, _INPUT_TYPES, _type_label)
    shaped = _shaped(name, typed_rows) | np.isin(typed_rows, calls)
    shaped_rows, shaped_args = typed_rows[shaped], list(compress(typed_args, shaped))
    dims_codes, dims_labels = _raw_labels(shaped_args, shaped_rows, n, _INPUT_DIMS, _dims_label)
    concrete_codes, concrete_labels = _raw_labels(shaped_args, shaped_rows, n, _CONCRETE, _concrete_label)
    flops = np.full(n, np.nan)
    if len(op_rows):
        flops[op_rows] = _column(op_args, "flops", np.float64, _float_or_nan, _NUM)
    comm_codes, comm_labels = _comm_args(args, _comm_rows(name, cat))
    columns = {"pid": pid, "tid": tid, "ts": ts, "dur": dur, "name": name, "cat": cat,
               "device": device, "stream": stream, "correlation": _int_column(args, "correlation"),
               "external_id": external, "bytes": nbytes, "input_types": type_codes,
               "comm_args": comm_codes, "input_dims": dims_codes, "concrete_inputs": concrete_codes,
               "flops": flops}
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
        "flops": c["flops"]})
    return table, skipped, unfit


_COMM_KERNEL = re.compile(r"nccl|rccl", re.IGNORECASE)
COMM_OP = "record_param_comms"
COMM_CALL_PREFIXES = ("nccl:", "c10d::")  # collective calls: c10d ops, the nccl: annotations
_COMM_GETTERS = tuple(attrgetter(f) for f in
                      ("collective", "in_nelems", "out_nelems", "group_size", "comm_dtype",
                       "process_group"))


def _comm_rows(name: pd.Categorical, cat: pd.Categorical) -> np.ndarray:
    """The rows that may carry collective args: record_param_comms cpu ops and NCCL/RCCL
    kernels (each distinct name tested once)."""
    labels = name.categories
    op_codes = np.flatnonzero(labels == COMM_OP)
    kernel_codes = np.array([i for i, n in enumerate(labels) if _COMM_KERNEL.search(n)], dtype=np.int64)
    codes = np.asarray(name.codes)
    is_op = np.isin(codes, op_codes) & np.asarray(cat == "cpu_op")
    is_kernel = np.isin(codes, kernel_codes) & np.asarray(cat == "kernel")
    return np.flatnonzero(is_op | is_kernel)


def _comm_calls(name: pd.Categorical, cat: pd.Categorical) -> np.ndarray:
    """The rows of the collective calls whose `Input Dims` say what they move: `c10d::*` cpu ops
    and `nccl:*` annotations or ops (each distinct name tested once)."""
    wanted = np.append(np.asarray(name.categories.str.startswith(COMM_CALL_PREFIXES), dtype=bool), False)
    codes = np.asarray(name.codes)
    host = np.asarray(cat.isin(["cpu_op", "user_annotation"]))
    return np.flatnonzero(wanted[codes] & host)


def _comm_args(args: list, rows: np.ndarray) -> tuple[np.ndarray, pd.Index]:
    """The collective args of `rows` as codes into labels (model.COMM_ARG_FIELDS joined by
    `|`, a blank for an absent or unusable value); -1 where a row has none."""
    codes = np.full(len(args), -1, dtype=np.int32)
    if not len(rows):
        return codes, pd.Index([], dtype=object)
    picked = [args[i] for i in rows.tolist()]
    fields = [list(map(get, picked)) for get in _COMM_GETTERS]
    text = [_comm_text(fields[0]), _comm_count(fields[1]), _comm_count(fields[2]),
            _comm_count(fields[3]), _comm_text(fields[4]), _comm_text(fields[5])]
    joined = ["|".join(parts) for parts in zip(*text)]
    labels: dict[str, int] = {}
    blank = "|" * (len(text) - 1)
    given = np.array([j != blank for j in joined], dtype=bool)
    codes[rows[given]] = [labels.setdefault(j, len(labels)) for j, g in zip(joined, given) if g]
    return codes, pd.Index(list(labels), dtype=object)


def _comm_text(values: list) -> list[str]:
    return [v if v.__class__ is str and "|" not in v else "" for v in values]


def _comm_count(values: list) -> list[str]:
    """A count (an int, or an integral float, at least 0) as decimal text; blank otherwise."""
    return [str(int(v)) if _number(v) and v >= 0 and float(v).is_integer()
            else "" for v in values]


_INPUT_TYPES = attrgetter("input_types")
_INPUT_DIMS = attrgetter("input_dims")
_CONCRETE = attrgetter("concrete_inputs")
TYPE_SEPARATOR = ", "
CONCRETE_SEPARATOR = "|"


def _shaped(name: pd.Categorical, op_rows: np.ndarray) -> np.ndarray:
    """Which of the rows `op_rows` are named in SHAPED_OPS (each distinct name tested once)."""
    wanted = np.append(np.asarray(name.categories.isin(list(SHAPED_OPS)), dtype=bool), False)
    return wanted[np.asarray(name.codes)[op_rows]]


def _raw_labels(op_args: list, op_rows: np.ndarray, n: int, get, label) -> tuple[np.ndarray, pd.Index]:
    """One raw-JSON arg of each cpu op (`Input type`, `Input Dims`, `Concrete Inputs`) as codes
    into text labels (`label(raw)`; None: unusable); -1 where absent or unusable. Each distinct
    raw value is decoded once: a model repeats a handful of values over thousands of ops."""
    codes = np.full(n, -1, dtype=np.int32)
    if not len(op_rows):
        return codes, pd.Index([], dtype=object)
    values = list(map(get, op_args))
    absent = get(NO_ARGS)  # the shared default: the arg is not in the event
    given = list(map(is_not, values, repeat(absent)))
    if not all(given):
        op_rows, values = op_rows[np.asarray(given, dtype=bool)], list(compress(values, given))
    raw = list(map(bytes, values))
    index: dict[bytes, int] = {}
    raw_codes = np.fromiter([index.setdefault(v, len(index)) for v in raw], np.int32, len(raw))
    labels: dict[str, int] = {}
    code_of = np.array([-1 if (text := label(v)) is None else labels.setdefault(text, len(labels))
                        for v in index], dtype=np.int32)
    if len(raw):
        codes[op_rows] = code_of[raw_codes]
    return codes, pd.Index(list(labels), dtype=object)


def _decoded(raw: bytes):
    if not raw:
        return None
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return None


def _dims_label(raw: bytes) -> "str | None":
    """`Input Dims` as text: each input's sizes joined by `x` (`141x512`; blank for a scalar or
    a 0-d tensor, `?` for anything else, such as a tensor list), inputs joined by TYPE_SEPARATOR."""
    value = _decoded(raw)
    if value.__class__ is not list:
        return None
    return TYPE_SEPARATOR.join(_sizes(v) for v in value)


def _sizes(value) -> str:
    if value.__class__ is list and all(v.__class__ is int and v >= 0 for v in value):
        return "x".join(map(str, value))
    return "?"


def _concrete_label(raw: bytes) -> "str | None":
    """`Concrete Inputs` (strings such as `[2, 2]`, `1`, `False`) joined by CONCRETE_SEPARATOR;
    an entry that is not a string, or holds the separator, is blank."""
    value = _decoded(raw)
    if value.__class__ is not list:
        return None
    return CONCRETE_SEPARATOR.join(v if v.__class__ is str and CONCRETE_SEPARATOR not in v else ""
                                   for v in value)


def _type_label(raw: bytes) -> "str | None":
    """A list of type names joined by TYPE_SEPARATOR (an entry that is not a string, as a
    malformed trace may hold, is blank); a lone string as it is; anything else None."""
    if not raw:
        return None
    try:
        value = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return None
    if value.__class__ is str:
        return value
    if value.__class__ is not list:
        return None
    return TYPE_SEPARATOR.join(v if v.__class__ is str else "" for v in value)


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


BAD_ID = -2  # `_gpu_id` of an id no GPU has


def _gpu_id(v) -> int:
    """A device or stream id: an int (or an integral float, or decimal text) from 0 to
    INT64_MAX as it is; absent or other text (ROCm's hex streams) -1; negative or beyond int64
    BAD_ID (malformed: the event is skipped)."""
    if v.__class__ is int:
        return v if 0 <= v <= INT64_MAX else BAD_ID
    if v.__class__ is float:
        if not v.is_integer():  # NaN, infinities, fractions
            return BAD_ID
        return int(v) if 0.0 <= v < 2.0**63 else BAD_ID
    if v.__class__ is str and v.isascii() and v.isdigit():
        return int(v) if len(v) < 19 or int(v) <= INT64_MAX else BAD_ID
    return -1


def _gpu_id_column(gpu_args: list, attr: str) -> tuple[np.ndarray, np.ndarray]:
    """A GPU row's device or stream ids at their full width (int64: 2^32 stays 2^32, never
    wraps onto GPU 0) and which of them are malformed."""
    values = _column(gpu_args, attr, np.int64, _gpu_id, _INT)
    if (values < 0).any():  # absent ids, or negative ints taken as they are: each value read again
        values = np.fromiter(map(_gpu_id, map(attrgetter(attr), gpu_args)), np.int64, len(gpu_args))
    return values, values == BAD_ID


def _stream_from_tid(tid) -> int:
    if tid.__class__ is int:
        return tid if INT64_MIN <= tid <= INT64_MAX else -1
    match = _STREAM_TID.search(str(tid))
    return int(match.group(1)) if match else -1


def concat_tables(tables: list[pd.DataFrame], sort: bool = True) -> pd.DataFrame:
    """Stack tables; categories are unioned so names stay interned. Sorted by (rank, ts)."""
    tables = [t for t in tables if len(t)] or tables[:1]  # an empty table's categories have no dtype
    if len(tables) == 1:
        out = tables[0]
    else:
        from pandas.api.types import union_categoricals
        interned = ("name", "cat", "input_types", "comm_args", "input_dims", "concrete_inputs")
        cats = {c: _same_label_type(union_categoricals([t[c] for t in tables]), [t[c] for t in tables])
                for c in interned}
        out = pd.concat([t.drop(columns=list(interned)) for t in tables], ignore_index=True)
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


_IS_INSTANT = Instant.__instancecheck__
NO_MEMORY_ARGS = MemoryArgs()
_NAME = attrgetter("name")


def memory_table(doc: TraceDoc, ids: "dict[str, int] | None" = None) -> pd.DataFrame:
    """The `[memory]` instants of one document as a table (model.py MEMORY_COLUMNS; rank 0 until
    `assign_ranks`), in document order. An event without a finite ts, or one beyond 2^53 us
    (`times.MAX_ABS_US`), is dropped; an odd value of an arg reads as absent (-1 / NaN)."""
    insts = list(filter(_IS_INSTANT, doc.traceEvents))
    if insts:
        insts = list(compress(insts, map(eq, map(_NAME, insts), repeat(MEMORY_EVENT))))
    if not insts:
        return empty_memory()
    n = len(insts)
    try:  # every ts a finite number: one C-level pass (a Python check per event costs 3x more)
        ts = np.fromiter(map(_TS, insts), np.float64, n)
        usable = bool((np.abs(ts) < times.MAX_ABS_US).all())  # NaN and inf compare False
    except (TypeError, OverflowError):
        usable = False
    if not usable:
        insts = list(compress(insts, map(_number, map(_TS, insts))))
        ts = np.fromiter(map(_TS, insts), np.float64, len(insts))
        near = np.abs(ts) < times.MAX_ABS_US
        if not near.all():  # a time that does not fit the trace (`times.fits`)
            insts, ts = list(compress(insts, near.tolist())), ts[near]
        n = len(insts)
        if not n:
            return empty_memory()
    args = [a if a is not None else NO_MEMORY_ARGS for a in map(attrgetter("args"), insts)]
    ids = new_ids() if ids is None else ids
    return pd.DataFrame({
        "rank": np.zeros(n, dtype=np.int32),
        "pid": _id_column(insts, "pid", ids, doc.int_or_str_ids),
        "tid": _id_column(insts, "tid", ids, doc.int_or_str_ids),
        "ts": ts,
        "device_type": _int_column(args, "device_type").astype(np.int32),
        "device": _int_column(args, "device_id"),  # int64: 2^32 never wraps onto GPU 0
        "bytes": _column(args, "bytes", np.float64, _float_or_nan, _NUM),
        "total_allocated": _column(args, "total_allocated", np.float64, _float_or_nan, _NUM),
        "total_reserved": _column(args, "total_reserved", np.float64, _float_or_nan, _NUM),
        "addr": _int_column(args, "addr")})


def empty_memory() -> pd.DataFrame:
    dtypes = {"rank": np.int32, "pid": np.int64, "tid": np.int64, "ts": np.float64,
              "device_type": np.int32, "device": np.int64, "bytes": np.float64,
              "total_allocated": np.float64, "total_reserved": np.float64, "addr": np.int64}
    return pd.DataFrame({c: np.empty(0, dtype=dtypes[c]) for c in MEMORY_COLUMNS})


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
