"""Bytes of a Chrome/Kineto trace -> typed msgspec structs holding only the fields we use.

This is the only place that parses JSON. Events keep `ph`, `cat`, `name`, `pid`, `tid`, `ts`,
`dur` and the few `args` keys the analyses need; everything else is skipped by the decoder
without building Python objects for it.
"""
from __future__ import annotations

import json
import re
from typing import Any, ClassVar, Union

import msgspec

from .frame import duplicated, events_end, events_start, top_keys
from .schema import PHASES, skipped_phases

Scalar = Union[int, float, str, None]


class Args(msgspec.Struct, frozen=True, gc=False):
    # Integer ids default to -1 so the table builder can take the fast all-int path.
    device: Scalar = -1
    stream: Scalar = -1
    correlation: Scalar = -1
    external_id: Scalar = msgspec.field(default=-1, name="External id")
    external_id_2021: Scalar = msgspec.field(default=-1, name="external id")
    python_id: Scalar = msgspec.field(default=-1, name="Python id")
    python_parent_id: Scalar = msgspec.field(default=-1, name="Python parent id")
    bytes: Scalar = float("nan")
    # What a `cuda_sync` event waits on (Stream Wait Event, Event Sync): the stream the CUDA event
    # was recorded on, and the correlation id of the cudaEventRecord call that recorded it.
    wait_on_stream: Scalar = -1
    wait_on_correlation: Scalar = msgspec.field(default=-1, name="wait_on_cuda_event_record_corr_id")
    # `Input type` of cpu ops (record_shapes): a list of type names per input. Kept raw (its bytes,
    # not a list of strings): most rows repeat a few values, which op_labels.py decodes once each.
    input_types: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    # `Input Dims` (record_shapes) and `Concrete Inputs` (newer torch: scalar arguments as text)
    # of cpu ops, kept raw like `Input type`; `flops`: the profiler's own estimate (with_flops).
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Concrete Inputs")
    flops: Scalar = float("nan")
    process_name: Scalar = msgspec.field(default=None, name="name")  # metadata events only
    # What a collective moves (record_param_comms ops; newer Kineto also writes them on NCCL
    # kernels). Rare keys, typed Any: an odd value is dropped by op_labels.py, never the event.
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    comm_dtype: Any = msgspec.field(default=None, name="dtype")
    process_group: Any = msgspec.field(default=None, name="Process Group Name")


NO_ARGS = Args()


# pid and tid: ints, or a string (Kineto's `Trace` span has pid "Spans"). A float or bool id
# fails this decode and the document is decoded again with `LooseComplete`: the table builder can
# then convert the ids of a strict document at C speed, with no per-value type check.
Id = Union[int, str, None]


class Complete(msgspec.Struct, tag_field="ph", tag="X", frozen=True, gc=False):
    """A complete event: the only kind the events table keeps."""

    cat: Scalar = None
    name: Scalar = None
    pid: Id = None
    tid: Id = None
    ts: Union[int, float, None] = None
    dur: Union[int, float, None] = None
    args: Union[Args, None] = None


class Metadata(msgspec.Struct, tag_field="ph", tag="M", frozen=True, gc=False):
    name: Scalar = None
    pid: Scalar = None
    tid: Scalar = None
    args: Union[Args, None] = None


class MemoryArgs(msgspec.Struct, frozen=True, gc=False):
    """The args of a `[memory]` instant (profile_memory=True). Typed Any: an odd value (a string,
    a nested list) is dropped by memory_table.py, never the event or the document."""

    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    bytes: Any = msgspec.field(default=None, name="Bytes")
    addr: Any = msgspec.field(default=None, name="Addr")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")


class Instant(msgspec.Struct, tag_field="ph", tag="i", frozen=True, gc=False):
    """An instant event (`ph: i`). Only the profiler's `[memory]` instants are kept (memory_table.py
    `memory_table`); the few other instants Kineto writes are dropped there (their args decode
    to an empty MemoryArgs: only the memory keys are read)."""

    name: Scalar = None
    pid: Id = None  # typed as a complete event's ids: the table converts them at C speed
    tid: Id = None
    ts: Union[int, float, None] = None
    args: Union[MemoryArgs, None] = None


MEMORY_EVENT = "[memory]"


READ_PHASES = "XMi"  # Complete, Metadata, Instant; every other phase is skipped (schema.py)
_KNOWN = set(PHASES)


class LooseComplete(Complete, tag="X"):
    """A complete event whose pid or tid may also be a float (a `Complete` for every reader)."""

    pid: Scalar = None
    tid: Scalar = None


class LooseInstant(Instant, tag="i"):
    """An instant whose pid or tid may also be a float (an `Instant` for every reader)."""

    pid: Scalar = None
    tid: Scalar = None


_SKIPPED = skipped_phases(READ_PHASES)
Event = Union[(Complete, Metadata, Instant) + _SKIPPED]
LooseEvent = Union[(LooseComplete, Metadata, LooseInstant) + _SKIPPED]


class DistributedInfo(msgspec.Struct, frozen=True):
    rank: Union[int, None] = None
    world_size: Union[int, None] = None
    backend: Union[str, None] = None


class TraceDoc(msgspec.Struct, frozen=True):
    traceEvents: list[Event]
    deviceProperties: Union[list[dict[str, Any]], None] = None
    distributedInfo: Union[DistributedInfo, None] = None
    baseTimeNanoseconds: Union[int, None] = None
    goodhartProf: Union[dict[str, Any], None] = None
    # Every complete and instant event's pid and tid is an int, a str or None (no float, no bool).
    int_or_str_ids: ClassVar[bool] = True


class LooseTraceDoc(TraceDoc, frozen=True):
    traceEvents: list[LooseEvent]
    int_or_str_ids: ClassVar[bool] = False


class DecodeError(ValueError):
    """The bytes are not a usable trace; the message says why in a few words."""


_decoder = msgspec.json.Decoder(TraceDoc)
_loose_decoder = msgspec.json.Decoder(LooseTraceDoc)
_NON_SPACE = re.compile(rb"\S")
_BOM = b"\xef\xbb\xbf"


def decode(raw: bytes) -> tuple[TraceDoc, int]:
    """The typed document and how many malformed events were skipped to get it.

    Every way bytes can fail to be a trace ends in DecodeError (never another exception): not
    JSON, not UTF-8 (only the events holding the bad bytes are skipped), nested deeper than the
    decoder's recursion limit, NaN/Infinity (Python's json writes them; read by a slower parser),
    numbers out of range (their events are skipped), a duplicated top-level key (AmbiguousDoc).
    """
    result = _decode(raw)
    check_keys(raw[3:] if raw[:3] == _BOM else raw)
    return result


class AmbiguousDoc(DecodeError):
    """A top-level key appears twice: decoders keep one value or the other."""


def check_keys(raw) -> None:
    """AmbiguousDoc when a top-level key of the document is duplicated. The keys around the
    events array are read from its head and tail (microseconds); a document whose head or tail
    cannot be told apart that way is scanned whole (a skip-parse)."""
    start = events_start(raw)
    end = events_end(raw, start - 1) if start is not None else None
    if end is not None:
        head = top_keys(bytes(memoryview(raw)[:start]) + b"]}") or []
        tail = top_keys(b'{"traceEvents":[' + bytes(memoryview(raw)[end:])) or []
        keys = head + tail[1:]
    else:
        keys = top_keys(raw) or []
    ambiguous(keys)


def ambiguous(keys: list[str]) -> None:
    key = duplicated(keys)
    if key is not None:
        raise AmbiguousDoc(f"duplicated top-level key {json.dumps(key)}")


def _decode(raw) -> tuple[TraceDoc, int]:
    if _NON_SPACE.search(raw) is None:
        raise DecodeError("empty file" if not len(raw) else "only whitespace")
    if raw[:3] == _BOM:
        raw = memoryview(raw)[3:]
    try:
        return _decoder.decode(raw), 0
    except (msgspec.ValidationError, UnicodeDecodeError) as exc:
        strict_error: Exception = exc
    except msgspec.DecodeError as exc:
        if _nonstandard_number(raw, exc):
            return _decode(_standard_json(raw))
        raise DecodeError(f"not valid JSON ({_short(exc)})") from None
    except RecursionError:
        raise DecodeError(TOO_DEEP) from None
    if _FLOAT_ID.search(str(strict_error)):  # a float pid or tid: the loose types take it
        try:
            return _loose_decoder.decode(raw), 0
        except (msgspec.ValidationError, UnicodeDecodeError) as exc:
            strict_error = exc
        except msgspec.DecodeError as exc:  # bad bytes after the float id
            if _nonstandard_number(raw, exc):
                return _decode(_standard_json(raw))
            raise DecodeError(f"not valid JSON ({_short(exc)})") from None
        except RecursionError:
            raise DecodeError(TOO_DEEP) from None
    return _decode_lenient(raw, strict_error)


_FLOAT_ID = re.compile(r"got `float` - at `\$(\.traceEvents)?\[\d+\]\.[pt]id`$")
TOO_DEEP = "nested too deeply (arrays or objects inside each other beyond the decoder's limit)"
_NONSTANDARD = re.compile(rb"NaN|Infinity")
_MALFORMED_AT = re.compile(r"\(byte (\d+)\)")
NONSTANDARD_MAX_BYTES = 256 << 20  # the slow parser needs ~10x the document in memory


def _nonstandard_number(raw, exc: msgspec.DecodeError) -> bool:
    """Whether decoding stopped at NaN, Infinity or -Infinity (not JSON, but Python writes them)."""
    at = _MALFORMED_AT.search(str(exc))
    return at is not None and _NONSTANDARD.match(raw, int(at.group(1))) is not None


def _standard_json(raw) -> bytes:
    """The document re-encoded as standard JSON: NaN/Infinity, and integers too large for any
    column, become null (their events are then skipped or their durations treated as 0)."""
    if len(raw) > NONSTANDARD_MAX_BYTES:
        raise DecodeError(f"uses NaN/Infinity (not JSON) and is too big for the slow parser that "
                          f"reads them ({len(raw) / 2**20:.0f} MB > {NONSTANDARD_MAX_BYTES >> 20} MB)")
    try:
        doc = json.loads(bytes(raw), parse_int=_bounded_int)
    except RecursionError:
        raise DecodeError(TOO_DEEP) from None
    except (ValueError, UnicodeDecodeError) as exc:  # json.JSONDecodeError is a ValueError
        raise DecodeError(f"not valid JSON ({_short(exc)})") from None
    return msgspec.json.encode(doc)


def parse_json(raw, type: Any = Any) -> Any:
    """Plain JSON -> Python objects (or `type`), with the loader's leniency and errors: a UTF-8
    BOM is skipped, NaN/Infinity are read (as null), too deep a nesting is a DecodeError."""
    if raw[:3] == _BOM:
        raw = memoryview(raw)[3:]
    try:
        try:
            return msgspec.json.decode(raw, type=type)
        except msgspec.DecodeError as exc:
            if isinstance(exc, msgspec.ValidationError) or not _nonstandard_number(raw, exc):
                raise
        return msgspec.json.decode(_standard_json(raw), type=type)
    except RecursionError:
        raise DecodeError(TOO_DEEP) from None
    except UnicodeDecodeError as exc:
        raise DecodeError(f"not UTF-8 text ({_short(exc)})") from None


def _bounded_int(text: str) -> "int | float":
    return int(text) if len(text) < 19 else float(text)  # float: inf (-> null) when too large


class _Phase(msgspec.Struct):
    ph: Any = None


_event_decoder = msgspec.json.Decoder(LooseEvent)
_phase_decoder = msgspec.json.Decoder(_Phase)
_HEADER_DECODERS = {name: msgspec.json.Decoder(Union[kind, None]) for name, kind in (
    ("deviceProperties", list[dict[str, Any]]), ("distributedInfo", DistributedInfo),
    ("baseTimeNanoseconds", int), ("goodhartProf", dict[str, Any]))}


def _decode_lenient(raw, strict_error: Exception) -> tuple[TraceDoc, int]:
    """Slow path for documents with some malformed events: keep the good ones, count the rest.

    The document is split into raw events without building them (the memory of the fast
    path, not of a full object tree); each event is then decoded alone."""
    try:
        top = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
    except msgspec.ValidationError:
        raise DecodeError(f"not a trace: top level is {_json_kind(raw)}, not an object") from None
    except msgspec.DecodeError as exc:  # the strict decode stopped before the broken part
        raise DecodeError(f"not valid JSON ({_short(exc)})") from None
    except RecursionError:
        raise DecodeError(TOO_DEEP) from None
    except UnicodeDecodeError as exc:  # in a top-level key
        raise DecodeError(f"not UTF-8 text ({_short(exc)})") from None
    if "traceEvents" not in top:
        raise DecodeError("not a trace: no traceEvents list")
    try:
        events = msgspec.json.decode(top["traceEvents"], type=list[msgspec.Raw])
    except msgspec.ValidationError:
        raise DecodeError(f"not a trace: traceEvents is {_json_kind(top['traceEvents'])}, "
                          f"not a list") from None
    good, skipped = _good_events(events)
    if skipped and not good:
        raise DecodeError(f"not a trace: none of its {skipped} events is well-formed "
                          f"({_short(strict_error)})")
    header = {}
    for name, decoder in _HEADER_DECODERS.items():
        try:  # a malformed header field is dropped, not worth failing over
            header[name] = decoder.decode(top[name]) if name in top else None
        except (msgspec.ValidationError, UnicodeDecodeError):
            header[name] = None
    return LooseTraceDoc(traceEvents=good, **header), skipped


def _good_events(events: list) -> tuple[list, int]:
    good, skipped = [], 0
    for ev in events:
        try:
            good.append(_event_decoder.decode(ev))
        except (msgspec.ValidationError, UnicodeDecodeError):
            skipped += not _unknown_phase(ev)
    return good, skipped


class ArrayEnd(DecodeError):
    """A piece `[...]` whose array closes before the piece ends: the events array of the
    document ends at `at` (index of its `]` in the piece) and top-level fields follow."""

    def __init__(self, at: int):
        super().__init__("the events array ends inside this piece")
        self.at = at


def raise_array_end(raw, exc: Exception) -> None:
    """ArrayEnd when msgspec stopped at bytes after the piece's list (a `]` closed it early)."""
    at = _TRAILING.search(str(exc))
    if at is not None:
        end = int(at.group(1)) - 2
        while end > 0 and raw[end] in b" \t\r\n":
            end -= 1
        raise ArrayEnd(end) from None


_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_events_decoder = msgspec.json.Decoder(list[Event])
_loose_events_decoder = msgspec.json.Decoder(list[LooseEvent])


def decode_events(raw) -> tuple[TraceDoc, int]:
    """A piece of a document's events array, `[event, ...]`, as a document with no header fields,
    decoded as `decode` decodes a whole document's events (strict, then loose ids, then event by
    event), and how many malformed events were skipped (a piece where none is well-formed is no
    error: other pieces may hold good ones). ArrayEnd if the array closes before the piece ends."""
    try:
        return TraceDoc(traceEvents=_events_decoder.decode(raw)), 0
    except (msgspec.ValidationError, UnicodeDecodeError) as exc:
        strict_error: Exception = exc
    except msgspec.DecodeError as exc:
        return _events_not_json(raw, exc)
    except RecursionError:
        raise DecodeError(TOO_DEEP) from None
    try:
        if _FLOAT_ID.search(str(strict_error)):
            try:
                return LooseTraceDoc(traceEvents=_loose_events_decoder.decode(raw)), 0
            except (msgspec.ValidationError, UnicodeDecodeError):
                pass
        events = msgspec.json.decode(raw, type=list[msgspec.Raw])
    except msgspec.ValidationError:
        raise DecodeError("not a list of events") from None
    except msgspec.DecodeError as exc:  # bad bytes after the event that failed validation
        return _events_not_json(raw, exc)
    except RecursionError:
        raise DecodeError(TOO_DEEP) from None
    good, skipped = _good_events(events)
    return LooseTraceDoc(traceEvents=good), skipped


def _events_not_json(raw, exc: msgspec.DecodeError) -> tuple[TraceDoc, int]:
    """A piece of events that msgspec cannot parse: ArrayEnd where the array closed early, the
    piece again through the standard-JSON rewrite where it holds NaN/Infinity, else not JSON."""
    raise_array_end(raw, exc)
    if _nonstandard_number(raw, exc):
        return decode_events(_standard_json(raw))
    raise DecodeError(f"not valid JSON ({_short(exc)})") from None


def _unknown_phase(ev: msgspec.Raw) -> bool:
    """An unknown phase letter is another tool's extension, not a malformed event."""
    try:
        ph = _phase_decoder.decode(ev).ph
    except (msgspec.ValidationError, UnicodeDecodeError):
        return False
    return isinstance(ph, str) and ph not in _KNOWN


def _json_kind(raw) -> str:
    first = _NON_SPACE.search(memoryview(raw)[:4096])
    char = bytes(memoryview(raw)[first.start():first.start() + 1]) if first else b""
    return {b"[": "a list", b"{": "an object", b'"': "a string", b"t": "a boolean", b"f": "a boolean",
            b"n": "null"}.get(char, "a number")


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) < 160 else text[:157] + "..."
