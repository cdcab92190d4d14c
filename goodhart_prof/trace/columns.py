"""Numeric and id columns of the tables, built from decoded structs at C speed: ints, floats,
interned names, pid/tid stand-in ids (one interning per document), GPU device and stream ids."""
from __future__ import annotations

import hashlib
import math
import re
from itertools import count, islice
from operator import attrgetter
from typing import Iterable

import numpy as np
import pandas as pd

_STREAM_TID = re.compile(r"stream\s*(\d{1,9})\b", re.IGNORECASE)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def new_ids() -> dict[str, int]:
    """The string-id interning of one document: its events, frames, memory events and process
    names all take their stand-in ids from it, so one pid has one id across them."""
    return {}


def int_id(value, names: dict[str, int]) -> int:
    """Ints stay; numeric strings become ints; other values (and ints beyond int64) get a
    negative id made from their text (`text_id`), the same in every piece, table and file of a
    load whatever the order they come in; `names` caches them."""
    if value.__class__ is int and INT64_MIN <= value <= INT64_MAX:
        return value
    if value is None:
        return -1
    text = str(value)
    if value.__class__ is str:  # read as int() reads it (as numpy does in `id_column`)
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


def parse_int(v) -> int:
    if v.__class__ is int:
        return v if INT64_MIN <= v <= INT64_MAX else -1
    if v.__class__ is str and v.isascii() and v.isdigit() and len(v) < 19:  # "²" is a digit to isdigit
        return int(v)
    if v.__class__ is float and v.is_integer() and -2.0**63 <= v < 2.0**63:  # NaN, inf: not integers
        return int(v)
    return -1


def column(items: list, attr: str, dtype, clean, good_class) -> np.ndarray:
    """A numeric column of one attribute: fast when every value already has the right type;
    otherwise only the odd values (nulls, a stray string pid) go through `clean`, so a handful of
    them does not slow a million rows."""
    get = attrgetter(attr)
    try:
        return np.fromiter(map(get, items), dtype, len(items))
    except (TypeError, ValueError, OverflowError):
        return _cleaned(list(map(get, items)), dtype, clean, good_class)


def values_column(values: list, dtype, clean, good_class) -> np.ndarray:
    """`column` of values already picked (the native decoder's odd values among its numbers)."""
    try:
        return np.fromiter(values, dtype, len(values))
    except (TypeError, ValueError, OverflowError):
        return _cleaned(values, dtype, clean, good_class)


def _cleaned(values: list, dtype, clean, good_class) -> np.ndarray:
    odd = [i for i, v in enumerate(values) if v.__class__ not in good_class]
    for i in odd:
        values[i] = clean(values[i])
    try:
        return np.fromiter(values, dtype, len(values))
    except (TypeError, ValueError, OverflowError):  # a number beyond the column's range
        return np.fromiter(map(clean, values), dtype, len(values))


_INT = (int,)
NUMBERS = (int, float)


def int_column(items: list, attr: str) -> np.ndarray:
    return column(items, attr, np.int64, parse_int, _INT)


def float_or_nan(v) -> float:
    return float(v) if is_number(v) else np.nan


def interned(values: Iterable, n: int) -> pd.Categorical:
    """`n` strings -> categorical (names are interned once, rows hold codes), categories in
    order of first appearance. A dict does it at C speed: each value maps to the row where it
    first appeared (`setdefault` with a running count), and those rows, increasing, are turned
    into dense codes by one searchsorted; 3x faster than pd.factorize on str objects."""
    index: dict = {}
    first = np.fromiter(map(index.setdefault, values, count()), np.int64, n)
    codes = np.searchsorted(np.fromiter(index.values(), np.int64, len(index)), first).astype(np.int32)
    return categorical_of(list(index), codes)


def categorical_of(values: list, codes: np.ndarray) -> pd.Categorical:
    """Codes into distinct values (in order of first appearance) -> categorical: text as it is,
    None as "", anything else as str(); values whose text is the same (the name 7 and the
    name "7") are merged, the categories then sorted."""
    labels = [u if u.__class__ is str else ("" if u is None else str(u)) for u in values]
    if len(set(labels)) != len(labels):
        return pd.Categorical(labels, categories=sorted(set(labels)))[codes]
    return pd.Categorical.from_codes(codes, categories=labels, validate=False)


def recode(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes into some label list -> dense codes in order of first appearance here, and the
    original code of each (`interned` of the labels the codes stand for). One hash pass
    (pd.factorize), not a sort: 1.3 ms against 14 ms for 123k events."""
    if not len(codes):
        return codes.astype(np.int32), np.empty(0, dtype=np.int64)
    dense, first = pd.factorize(codes)
    return dense.astype(np.int32), np.asarray(first).astype(codes.dtype)


def is_number(v) -> bool:
    """A finite int or float (NaN, infinities and ints beyond float's range are not)."""
    if v.__class__ not in NUMBERS:
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False



def id_column(items: list, attr: str, names: dict[str, int], int_or_str: bool = False) -> np.ndarray:
    """pid or tid as int64 (`int_id`). Kineto writes ints everywhere but in its `Trace` span,
    the last complete event (pid "Spans"): the run of values before that odd tail is converted
    at C speed, and only the tail goes through `int_id`. When the decoder guarantees ints,
    strings or None (`int_or_str`), numpy's conversion of the run agrees with `int_id` whenever
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
            out[head:] = [int_id(get(e), names) for e in items[head:]]
            return out
        except (TypeError, ValueError, OverflowError):  # odd values inside the run
            pass
    values = list(map(get, items))
    try:
        if sum(islice(values, head)).__class__ is int:
            out = np.empty(n, dtype=np.int64)
            out[:head] = np.fromiter(islice(values, head), np.int64, head)
            out[head:] = [int_id(v, names) for v in values[head:]]
            return out
    except (TypeError, OverflowError):  # odd values inside, or an int beyond int64
        pass
    kinds = set(map(type, values))
    if bool in kinds or float in kinds:  # dict keys would merge them with ints (1 == 1.0 == True)
        return np.fromiter([int_id(v, names) for v in values], np.int64, len(values))
    mapping = {v: int_id(v, names) for v in dict.fromkeys(values)}
    return np.fromiter(map(mapping.__getitem__, values), np.int64, len(values))


_ODD_TAIL = 16  # at most this many trailing non-int ids take the fast path


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


def gpu_id_column(gpu_args: list, attr: str) -> tuple[np.ndarray, np.ndarray]:
    """A GPU row's device or stream ids at their full width (int64: 2^32 stays 2^32, never
    wraps onto GPU 0) and which of them are malformed."""
    values = column(gpu_args, attr, np.int64, _gpu_id, _INT)
    # absent ids or negative ints taken as they are, or values numpy converts its own way (it
    # truncates 1.5 to 1 and reads " 7" as 7): each value read again
    if (values < 0).any() or set(map(type, map(attrgetter(attr), gpu_args))) - {int}:
        values = np.fromiter(map(_gpu_id, map(attrgetter(attr), gpu_args)), np.int64, len(gpu_args))
    return values, values == BAD_ID


def stream_from_tid(tid) -> int:
    if tid.__class__ is int:
        return tid if INT64_MIN <= tid <= INT64_MAX else -1
    match = _STREAM_TID.search(str(tid))
    return int(match.group(1)) if match else -1

