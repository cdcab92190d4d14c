"""What an op's args say, as interned text labels: the collective args (what a collective moves)
and the input types, dims and concrete inputs of cpu ops (record_shapes), each distinct raw value
decoded once."""
from __future__ import annotations

import re
from itertools import compress, repeat
from operator import attrgetter, is_not

import msgspec
import numpy as np
import pandas as pd

from .columns import is_number, recode
from .decode import NO_ARGS
from .model import SHAPED_OPS

_COMM_KERNEL = re.compile(r"nccl|rccl", re.IGNORECASE)
COMM_OP = "record_param_comms"
COMM_CALL_PREFIXES = ("nccl:", "c10d::")  # collective calls: c10d ops, the nccl: annotations
_COMM_GETTERS = tuple(attrgetter(f) for f in
                      ("collective", "in_nelems", "out_nelems", "group_size", "comm_dtype",
                       "process_group"))


def comm_rows(name: pd.Categorical, cat: pd.Categorical) -> np.ndarray:
    """The rows that may carry collective args: record_param_comms cpu ops and NCCL/RCCL
    kernels (each distinct name tested once)."""
    labels = name.categories
    op_codes = np.flatnonzero(labels == COMM_OP)
    kernel_codes = np.array([i for i, n in enumerate(labels) if _COMM_KERNEL.search(n)], dtype=np.int64)
    codes = np.asarray(name.codes)
    is_op = np.isin(codes, op_codes) & np.asarray(cat == "cpu_op")
    is_kernel = np.isin(codes, kernel_codes) & np.asarray(cat == "kernel")
    return np.flatnonzero(is_op | is_kernel)


def comm_calls(name: pd.Categorical, cat: pd.Categorical) -> np.ndarray:
    """The rows of the collective calls whose `Input Dims` say what they move: `c10d::*` cpu ops
    and `nccl:*` annotations or ops (each distinct name tested once)."""
    wanted = np.append(np.asarray(name.categories.str.startswith(COMM_CALL_PREFIXES), dtype=bool), False)
    codes = np.asarray(name.codes)
    host = np.asarray(cat.isin(["cpu_op", "user_annotation"]))
    return np.flatnonzero(wanted[codes] & host)


def comm_args(args: list, rows: np.ndarray) -> tuple[np.ndarray, pd.Index]:
    """The collective args of `rows` as codes into labels (model.COMM_ARG_FIELDS joined by
    `|`, a blank for an absent or unusable value); -1 where a row has none."""
    if not len(rows):
        return np.full(len(args), -1, dtype=np.int32), pd.Index([], dtype=object)
    picked = [args[i] for i in rows.tolist()]
    return comm_args_of(len(args), rows, [list(map(get, picked)) for get in _COMM_GETTERS])


def comm_args_of(n: int, rows: np.ndarray, fields: list[list]) -> tuple[np.ndarray, pd.Index]:
    """`comm_args` from the six fields' values (model.COMM_ARG_FIELDS order) of `rows`."""
    codes = np.full(n, -1, dtype=np.int32)
    if not len(rows):
        return codes, pd.Index([], dtype=object)
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
    return [str(int(v)) if is_number(v) and v >= 0 and float(v).is_integer()
            else "" for v in values]


INPUT_TYPES = attrgetter("input_types")
INPUT_DIMS = attrgetter("input_dims")
CONCRETE_INPUTS = attrgetter("concrete_inputs")
TYPE_SEPARATOR = ", "
CONCRETE_SEPARATOR = "|"


def is_shaped(name: pd.Categorical, op_rows: np.ndarray) -> np.ndarray:
    """Which of the rows `op_rows` are named in SHAPED_OPS (each distinct name tested once)."""
    wanted = np.append(np.asarray(name.categories.isin(list(SHAPED_OPS)), dtype=bool), False)
    return wanted[np.asarray(name.codes)[op_rows]]


def raw_labels(op_args: list, op_rows: np.ndarray, n: int, get, label) -> tuple[np.ndarray, pd.Index]:
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
    return _labelled(codes, op_rows, raw_codes, list(index), label)


def label_codes(raw_codes: np.ndarray, op_rows: np.ndarray, n: int, raw_values: list, label) -> tuple[np.ndarray, pd.Index]:
    """`raw_labels` where the raw values come interned (native decoder): `raw_codes` of `op_rows`
    index `raw_values` (-1: absent)."""
    given = raw_codes >= 0
    codes, first = recode(raw_codes[given])
    return _labelled(np.full(n, -1, dtype=np.int32), op_rows[given], codes,
                     [raw_values[i] for i in first.tolist()], label)


def _labelled(codes: np.ndarray, rows: np.ndarray, raw_codes: np.ndarray, distinct: list, label) -> tuple[np.ndarray, pd.Index]:
    """Each distinct raw value labelled once; labels in order of first appearance."""
    labels: dict[str, int] = {}
    code_of = np.array([-1 if (text := label(v)) is None else labels.setdefault(text, len(labels))
                        for v in distinct], dtype=np.int32)
    if len(raw_codes):
        codes[rows] = code_of[raw_codes]
    return codes, pd.Index(list(labels), dtype=object)


def _decoded(raw: bytes):
    if not raw:
        return None
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return None


def dims_label(raw: bytes) -> "str | None":
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


def concrete_label(raw: bytes) -> "str | None":
    """`Concrete Inputs` (strings such as `[2, 2]`, `1`, `False`) joined by CONCRETE_SEPARATOR;
    an entry that is not a string, or holds the separator, is blank."""
    value = _decoded(raw)
    if value.__class__ is not list:
        return None
    return CONCRETE_SEPARATOR.join(v if v.__class__ is str and CONCRETE_SEPARATOR not in v else ""
                                   for v in value)


def type_label(raw: bytes) -> "str | None":
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

