"""The events a trace's tables leave out, read again for the Perfetto export: every
`python_function` slice (torch's own frames too), every instant (`ph: i`/`I`), every counter
sample (`ph: C`), the metadata (`ph: M`: process and thread names, labels, sort indices), and the
complete events whose pid or tid is not a number (so that their tracks keep the trace's names).

A file is read piece by piece (`pieces.stream_pieces`, `pieces.PIECE_BYTES` at a time) and each
piece is turned into compact columns before the next is read: memory follows the events kept, not
the file. The ids stay as the trace wrote them (an int, or the text of a string id). Analyses never
use this: they read `Trace` tables.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import msgspec
import numpy as np

from .columns import is_number
from .decode import DecodeError, parse_json, raise_array_end
from .file_bytes import GZIP_MAGIC, read_bytes
from .pieces import PIECE_BYTES, BadCut, gzip_chunks, plain_chunks, stream_pieces
from .schema import skipped_phases
from .times import MAX_ABS_US

PYTHON_CAT = "python_function"


class _X(msgspec.Struct, tag_field="ph", tag="X", frozen=True, gc=False):
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None


class _I(msgspec.Struct, tag_field="ph", tag="i", frozen=True, gc=False):
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    s: Any = None
    args: msgspec.Raw = msgspec.Raw(b"")


class _OldI(_I, tag="I"):
    """The deprecated spelling of an instant."""


class _C(msgspec.Struct, tag_field="ph", tag="C", frozen=True, gc=False):
    cat: Any = None
    name: Any = None
    pid: Any = None
    id: Any = None
    ts: Any = None
    args: Any = None


class _M(msgspec.Struct, tag_field="ph", tag="M", frozen=True, gc=False):
    name: Any = None
    pid: Any = None
    tid: Any = None
    args: Any = None


_OTHERS = skipped_phases(read="XiICM")
_Event = Union[(_X, _I, _OldI, _C, _M) + _OTHERS]


class _Doc(msgspec.Struct, gc=False):
    traceEvents: list[_Event]
    distributedInfo: Any = None
    deviceProperties: msgspec.Raw = msgspec.Raw(b"")
    baseTimeNanoseconds: msgspec.Raw = msgspec.Raw(b"")
    goodhartProf: msgspec.Raw = msgspec.Raw(b"")


class _LooseDoc(msgspec.Struct, gc=False):
    traceEvents: list[msgspec.Raw]
    distributedInfo: Any = None
    deviceProperties: msgspec.Raw = msgspec.Raw(b"")
    baseTimeNanoseconds: msgspec.Raw = msgspec.Raw(b"")
    goodhartProf: msgspec.Raw = msgspec.Raw(b"")


_doc_decoder = msgspec.json.Decoder(_Doc)
_event_decoder = msgspec.json.Decoder(_Event)
_events_decoder = msgspec.json.Decoder(list[_Event])


def _time(v) -> "float | None":
    """A time that fits the trace, as the loader reads it (`times.fits`): a number within
    +-2^53 us; None otherwise (NaN, infinities, ints beyond float, farther times)."""
    if v.__class__ not in (int, float):
        return None
    try:
        t = float(v)
    except OverflowError:
        return None
    return t if abs(t) < MAX_ABS_US else None  # NaN compares False


def _id(v) -> "int | str":
    """An id as the trace wrote it: ints (and numeric text) as ints, None as -1, anything else as
    its text."""
    if v.__class__ is int:
        return v
    if v is None:
        return -1
    if v.__class__ is str:
        try:
            return int(v)
        except ValueError:
            return v
    return str(v)


def _text(v) -> str:
    return v if v.__class__ is str else ("" if v is None else str(v))


@dataclass
class Extras:
    """What one trace file holds beyond its tables. Threads are interned: `threads[k]` is the
    (pid, tid) of thread k as the trace wrote them (int, or the text of a string id)."""

    path: Path
    threads: list = field(default_factory=list)
    names: list = field(default_factory=list)        # interned event names and categories
    # python_function slices: thread, name code, ts (us), dur (us)
    py_thread: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    py_name: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    py_ts: np.ndarray = field(default_factory=lambda: np.empty(0))
    py_dur: np.ndarray = field(default_factory=lambda: np.empty(0))
    # instants: thread, name code, cat code, scope ("t", "p", "g"), ts (us), args (raw JSON bytes)
    instants: list = field(default_factory=list)
    counters: list = field(default_factory=list)     # (pid, name, id, ts, {series: value})
    metadata: list = field(default_factory=list)     # (name, pid, tid, args dict)
    odd_complete: list = field(default_factory=list)  # (ts, name, pid, tid) of X with text ids
    distributed_rank: "int | None" = None
    skipped: int = 0                                 # events with no usable ts (`_time`)

    def py_count(self) -> int:
        return len(self.py_ts)


class _Builder:
    def __init__(self, path: Path):
        self.out = Extras(path)
        self._threads: dict = {}
        self._names: dict = {}
        self._py: list = [[], [], [], []]

    def thread(self, pid, tid) -> int:
        key = (_id(pid), _id(tid))
        k = self._threads.get(key)
        if k is None:
            k = self._threads[key] = len(self._threads)
            self.out.threads.append(key)
        return k

    def name(self, v) -> int:
        text = _text(v)
        k = self._names.get(text)
        if k is None:
            k = self._names[text] = len(self._names)
            self.out.names.append(text)
        return k

    def add(self, events: list) -> None:
        out = self.out
        py_thread, py_name, py_ts, py_dur = self._py
        for ev in events:
            cls = ev.__class__
            if cls is _X:
                if ev.cat == PYTHON_CAT:
                    t, d = _time(ev.ts), ev.dur
                    d = float(d) if is_number(d) and d > 0 else 0.0
                    if t is None or not abs(t + d) < MAX_ABS_US:
                        out.skipped += 1
                        continue
                    py_thread.append(self.thread(ev.pid, ev.tid))
                    py_name.append(self.name(ev.name))
                    py_ts.append(t)
                    py_dur.append(d)
                elif ev.pid.__class__ not in (int, type(None)) or ev.tid.__class__ not in (int, type(None)):
                    if (t := _time(ev.ts)) is not None:
                        out.odd_complete.append((t, _text(ev.name), _id(ev.pid), _id(ev.tid)))
            elif cls is _I or cls is _OldI:
                if (t := _time(ev.ts)) is None:
                    out.skipped += 1
                    continue
                scope = ev.s if ev.s in ("g", "p") else "t"
                out.instants.append((self.thread(ev.pid, ev.tid), self.name(ev.name), self.name(ev.cat),
                                     scope, t, bytes(ev.args)))
            elif cls is _C:
                if (t := _time(ev.ts)) is None or not isinstance(ev.args, dict):
                    out.skipped += 1
                    continue
                series = {str(k): float(v) for k, v in ev.args.items() if is_number(v)}
                out.counters.append((_id(ev.pid), _text(ev.name), ev.id, t, series))
            elif cls is _M:
                out.metadata.append((_text(ev.name), _id(ev.pid), _id(ev.tid),
                                     ev.args if isinstance(ev.args, dict) else {}))

    def finish(self) -> Extras:
        py_thread, py_name, py_ts, py_dur = self._py
        out = self.out
        out.py_thread = np.asarray(py_thread, np.int32)
        out.py_name = np.asarray(py_name, np.int32)
        out.py_ts = np.asarray(py_ts, np.float64)
        out.py_dur = np.asarray(py_dur, np.float64)
        return out


def _decode(raw) -> "tuple[_Doc | _LooseDoc, list]":
    """A document (or piece) -> its typed events; a document with an event of an unknown phase
    or odd fields is decoded event by event, keeping what decodes (as the loader does)."""
    try:
        doc = _doc_decoder.decode(raw)
        return doc, doc.traceEvents
    except (msgspec.ValidationError, UnicodeDecodeError):
        pass
    except msgspec.DecodeError as exc:
        raise DecodeError(f"not valid JSON ({exc})") from None
    try:
        doc = parse_json(raw, type=_LooseDoc)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise DecodeError(f"not a trace ({exc})") from None
    events = []
    for ev in doc.traceEvents:
        try:
            events.append(_event_decoder.decode(ev))
        except (msgspec.ValidationError, UnicodeDecodeError):
            continue
    return doc, events


def _decode_events(raw) -> list:
    """A piece `[event, ...]` of a cut document -> its typed events (event by event when one is
    odd); ArrayEnd when the list closes early (the cutter then finds the tail there)."""
    try:
        return _events_decoder.decode(raw)
    except (msgspec.ValidationError, UnicodeDecodeError):
        pass
    except msgspec.DecodeError as exc:
        raise_array_end(raw, exc)
        if b"NaN" not in raw and b"Infinity" not in raw:
            raise DecodeError(f"not valid JSON ({exc})") from None
    try:
        items = parse_json(raw, type=list[msgspec.Raw])
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise_array_end(raw, exc)
        raise DecodeError(f"not a trace ({exc})") from None
    events = []
    for ev in items:
        try:
            events.append(_event_decoder.decode(ev))
        except (msgspec.ValidationError, UnicodeDecodeError):
            continue
    return events


def read_extras(path: Path) -> Extras:
    """The events of trace file `path` that its tables leave out (DecodeError if it cannot be
    read: the loader read it, so only a file changed since then gets there)."""
    path = Path(path)
    builder = _Builder(path)

    def use(raw, header: bool) -> None:
        if header:  # the head or the tail of a cut document, or a whole one
            doc, events = _decode(raw)
            builder.add(events)
            _note_rank(builder.out, doc)
        else:
            builder.add(_decode_events(raw))

    try:
        with open(path, "rb") as fh:
            gz = fh.read(2) == GZIP_MAGIC
        chunks = gzip_chunks(path) if gz else plain_chunks(path)
        stream_pieces(chunks, PIECE_BYTES, use)
    except (BadCut, DecodeError):
        builder = _Builder(path)  # start again on the whole document
        use(read_bytes(path), True)
    except OSError as exc:
        raise DecodeError(f"cannot be read ({exc})") from None
    return builder.finish()


def _note_rank(out: Extras, doc) -> None:
    info = doc.distributedInfo
    if isinstance(info, dict) and info.get("rank").__class__ is int:
        out.distributed_rank = info["rank"]
