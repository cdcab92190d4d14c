"""The top level of a trace document, found without decoding its events: where the
`traceEvents` array starts and ends, and the top-level keys (a duplicated one makes the document
ambiguous: JSON decoders keep one of the two values, and which one a piece sees depends on
where the file was cut).

`events_start` reads the head (the bytes before the array), `events_end` scans the tail back from
the end of the document (numpy over a window that grows while the tail is not resolved), so both
cost microseconds on a trace whose fields around the events are small. `top_keys` is exact on any
document and costs a skip-parse of every value (about a quarter of a typed decode): the fallback
when the head or tail cannot be told apart cheaply.
"""
from __future__ import annotations

import re

import msgspec
import numpy as np

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_KEY = re.compile(rb'\s*("(?:[^"\\]|\\.)*")\s*:\s*')
_NEXT = re.compile(rb"\s*([,}])")
_OPEN = re.compile(rb"\s*\{")
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
HEAD_LIMIT = 64 << 20      # `events_start` gives up on a head longer than this (top_keys then)
TAIL_WINDOW = 4 << 10      # `events_end` scans this much of the end first, then 8x more, ...
TAIL_LIMIT = 16 << 20      # ... up to this much (beyond: the caller decodes or scans exactly)
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_CLOSERS = np.zeros(256, np.int8)
_CLOSERS[[ord("}"), ord("]")]] = 1
_CLOSERS[[ord("{"), ord("[")]] = -1
_SPACE = np.zeros(256, bool)
_SPACE[[ord(" "), ord("\t"), ord("\n"), ord("\r")]] = True


def events_start(buf, complete: bool = True) -> "int | None":
    """Index just past the `[` that opens the top-level `traceEvents` array of the document
    starting at buf[0]. None when it is not there (or the head is not a JSON object prefix that
    ends in that key: e.g. a `"traceEvents"` nested in an earlier field), or, with `complete`
    False (more bytes to come), when it may still come."""
    found = _EVENTS_KEY.search(buf, 0, HEAD_LIMIT)
    if found is None:
        return None
    start = found.end()
    head = bytes(memoryview(buf)[:start]) + b"]}"
    try:
        top = msgspec.json.decode(head, type=dict[str, msgspec.Raw])
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    return start if bytes(top.get("traceEvents", b"")) == b"[]" else None


def events_end(buf, events_at: "int | None" = None, partial: bool = False) -> "int | None":
    """Index in `buf` of the `]` closing the top-level `traceEvents` array, scanning back from the
    end of the document (`buf` ends with it). `events_at`: index in `buf` of that array's `[`
    when `buf` holds it (its `]` is then the first top-level token after it); `partial`: `buf`
    starts somewhere inside the document. None when the tail is not resolved within TAIL_LIMIT
    bytes or is not a JSON object's end."""
    n, window = len(buf), TAIL_WINDOW
    while True:
        lo = max(0, n - window)
        opener = None if events_at is None or events_at < lo else events_at - lo
        found = _closing_bracket(np.frombuffer(buf, np.uint8, n - lo, lo),
                                 (lo == 0 and not partial) or opener is not None, opener)
        if found is not None:
            return lo + found if found >= 0 else None
        if lo == 0 or window >= TAIL_LIMIT:
            return None
        window *= 8


def _closing_bracket(a: np.ndarray, whole: bool, opener: "int | None") -> "int | None":
    """Index of the events array's `]` in `a` (the last bytes of a document); -1: the bytes are
    not the end of a JSON object; None: not resolved in this window."""
    n = len(a)
    if not n:
        return -1
    backslash = a == _BACKSLASH
    idx = np.arange(n)
    last_other = np.maximum.accumulate(np.where(backslash, -1, idx))  # last non-backslash <= i
    quotes = np.flatnonzero(a == _QUOTE)
    before = quotes - 1
    runs = np.where(before >= 0, before - last_other[np.maximum(before, 0)], 0)
    if not whole and len(quotes) and (quotes[0] == 0 or (last_other[np.maximum(before, 0)] < 0).any()):
        return None  # a backslash run reaching the window's start: the quote is ambiguous
    real = np.zeros(n, np.int64)
    real[quotes[runs % 2 == 0]] = 1
    after = np.cumsum(real[::-1])[::-1] - real          # real quotes after i: odd inside a string
    outside = (after % 2 == 0) & (real == 0)
    delta = np.where(outside, _CLOSERS[a], 0).astype(np.int64)
    level = np.cumsum(delta[::-1])[::-1] - delta         # brackets still open after i, from the end
    token = ~_SPACE[a] & ((after % 2 == 0) | (real == 1))
    tokens = np.flatnonzero(token)
    if not len(tokens) or a[tokens[-1]] != ord("}") or level[tokens[-1]] != 0:
        return -1
    if (level[:tokens[-1]] < 1).any():
        return -1
    top = tokens[level[tokens] == 1]
    if opener is not None:
        top = top[top > opener]
    if not len(top):
        return None if not whole else -1
    first = top[0]
    inside = level[(opener + 1 if opener is not None else 0):first]
    if a[first] != ord("]") or (inside < 2).any():
        return -1 if whole or opener is not None else None
    return int(first)


def top_keys(buf) -> "list[str] | None":
    """The keys of the top-level object of the JSON document `buf`, in order, repeats kept
    (None if `buf` is not a JSON object). Each value is skipped by msgspec (validated, not built)."""
    view = memoryview(buf)
    at = _OPEN.match(buf)
    if at is None:
        return None
    pos, keys = at.end(), []
    if re.compile(rb"\s*\}").match(buf, pos):
        return keys
    while True:
        key = _KEY.match(buf, pos)
        if key is None:
            return None
        try:
            keys.append(msgspec.json.decode(key.group(1), type=str))
        except (msgspec.DecodeError, UnicodeDecodeError):
            return None
        pos = key.end()
        skipped = value_length(view[pos:])
        if skipped is None:
            return None
        follow = _NEXT.match(buf, pos + skipped)
        if follow is None:
            return None
        pos = follow.end()
        if follow.group(1) == b"}":
            return keys


def value_length(view) -> "int | None":
    """How many bytes the JSON value at the start of `view` spans up to the first non-space
    byte after it (None: `view` holds one value only, or it is not valid JSON)."""
    try:
        msgspec.json.decode(view, type=msgspec.Raw)
    except msgspec.DecodeError as exc:
        at = _TRAILING.search(str(exc))
        return int(at.group(1)) - 1 if at else None
    except (RecursionError, UnicodeDecodeError):
        return None
    return None


def duplicated(keys: list[str]) -> "str | None":
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            return key
        seen.add(key)
    return None
