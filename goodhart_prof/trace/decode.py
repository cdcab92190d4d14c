"""Bytes of a Chrome/Kineto trace -> typed msgspec structs holding only the fields we use.

This is the only place that parses JSON. Events keep `ph`, `cat`, `name`, `pid`, `tid`, `ts`,
`dur` and the few `args` keys the analyses need; everything else is skipped by the decoder
without building Python objects for it.
"""
from __future__ import annotations

import gzip
import mmap
import os
import re
import zlib
from typing import Any, Union

import msgspec

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
    process_name: Scalar = msgspec.field(default=None, name="name")  # metadata events only
    labels: Scalar = None


NO_ARGS = Args()


class Complete(msgspec.Struct, tag_field="ph", tag="X", frozen=True, gc=False):
    """A complete event: the only kind the events table keeps."""

    cat: Scalar = None
    name: Scalar = None
    pid: Scalar = None
    tid: Scalar = None
    ts: Union[int, float, None] = None
    dur: Union[int, float, None] = None
    args: Union[Args, None] = None


class Metadata(msgspec.Struct, tag_field="ph", tag="M", frozen=True, gc=False):
    name: Scalar = None
    pid: Scalar = None
    tid: Scalar = None
    args: Union[Args, None] = None


def _skipped(tag: str) -> type:
    # Other phases (instants, flows, counters, ...) are recognised and their fields skipped, which
    # is what makes the typed decode cheaper than decoding everything.
    return msgspec.defstruct(f"Skipped_{tag}", [], tag_field="ph", tag=tag, frozen=True, gc=False)


SKIPPED_PHASES = "BEbeinstfCPONDRTIcv"
_KNOWN = set("XM" + SKIPPED_PHASES)
Event = Union[(Complete, Metadata) + tuple(_skipped(t) for t in SKIPPED_PHASES)]


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


class DecodeError(ValueError):
    """The bytes are not a usable trace; the message says why in a few words."""


_decoder = msgspec.json.Decoder(TraceDoc)
GZIP_MAGIC = b"\x1f\x8b"

try:  # ISA-L's gunzip is about twice as fast as zlib's; same format, same errors
    from isal.igzip import decompress as _gunzip
except ImportError:  # pragma: no cover - isal is a dependency, but only a speed-up
    _gunzip = gzip.decompress
_NON_SPACE = re.compile(rb"\S")


def read_bytes(path) -> "mmap.mmap | bytes":
    """File contents, gunzipped when the bytes (not the suffix) say gzip.

    A plain file is mapped copy-on-write (no read, no copy: pages load as the decoder reaches
    them, and `piece` may write into the mapping without touching the file).
    """
    with open(path, "rb") as fh:
        if fh.read(2) == GZIP_MAGIC:
            fh.seek(0)
            try:
                return _gunzip(fh.read())
            except (EOFError, OSError, zlib.error) as exc:
                raise DecodeError(f"truncated or corrupt gzip data ({exc})") from None
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return b""
        return mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_COPY)


def decode(raw: bytes) -> tuple[TraceDoc, int]:
    """The typed document and how many malformed events were skipped to get it."""
    if _NON_SPACE.search(raw) is None:
        raise DecodeError("empty file" if not len(raw) else "only whitespace")
    try:
        return _decoder.decode(raw), 0
    except msgspec.ValidationError as exc:
        strict_error = exc
    except msgspec.DecodeError as exc:
        raise DecodeError(f"not valid JSON ({_short(exc)})") from None
    return _decode_lenient(raw, strict_error)


def _decode_lenient(raw: bytes, strict_error: msgspec.ValidationError) -> tuple[TraceDoc, int]:
    """Slow path for documents with some malformed events: keep the good ones, count the rest."""
    doc = msgspec.json.decode(raw)
    if not isinstance(doc, dict):
        raise DecodeError(f"not a trace: top level is {_json_type(doc)}, not an object")
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise DecodeError("not a trace: no traceEvents list" if events is None
                          else f"not a trace: traceEvents is {_json_type(events)}, not a list")
    good, skipped = [], 0
    for ev in events:
        try:
            good.append(msgspec.convert(ev, Event))
        except msgspec.ValidationError:
            # An unknown phase letter is another tool's extension, not a malformed event.
            unknown_phase = isinstance(ev, dict) and isinstance(ev.get("ph"), str) and ev["ph"] not in _KNOWN
            skipped += not unknown_phase
    header = {k: v for k, v in doc.items() if k != "traceEvents"}
    try:
        meta = msgspec.convert({**header, "traceEvents": []}, TraceDoc)
    except msgspec.ValidationError:
        meta = TraceDoc(traceEvents=[])  # a malformed header field is not worth failing over
    if skipped and not good:
        raise DecodeError(f"not a trace: none of its {skipped} events is well-formed "
                          f"({_short(strict_error)})")
    return msgspec.structs.replace(meta, traceEvents=good), skipped


def _json_type(value: Any) -> str:
    return {list: "a list", dict: "an object", str: "a string", int: "a number",
            float: "a number", bool: "a boolean", type(None): "null"}.get(type(value), "unknown")


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) < 160 else text[:157] + "..."


# -- splitting one big document so that several processes can decode it ------------------------
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_PIECE_HEAD = b'{"traceEvents":['


def split_points(raw: bytes, parts: int, first_share: float | None = None) -> list[tuple[int, int]] | None:
    """Candidate cuts between two events near each 1/parts of the document.

    Each cut is (index of the `}` closing an event, index of the `{` opening the next). A cut
    that lands inside a nested value or a string makes a piece invalid JSON, which decoding the
    piece detects; the caller then falls back to decoding the whole document. `first_share`
    gives the first piece a larger part (its process has no result to ship back).
    """
    start = raw.find(b'"traceEvents"')
    if start < 0 or parts < 2:
        return None
    first = first_share if first_share is not None else 1 / parts
    bounds = [first + (1 - first) * (k - 1) / (parts - 1) for k in range(1, parts)]
    cuts: list[tuple[int, int]] = []
    for bound in bounds:
        pos = max(start + len(_PIECE_HEAD), int(len(raw) * bound), cuts[-1][1] if cuts else 0)
        match = _BOUNDARY.search(raw, pos)
        if match is None:
            return None
        cuts.append((match.start(), match.end() - 1))
    return cuts


def piece(raw: "mmap.mmap", cuts: list[tuple[int, int]], i: int) -> memoryview:
    """Piece i of the document as a standalone trace document, made in place (no copy).

    The bytes around the piece are overwritten, so each buffer serves one piece only (every
    worker reads its own copy of the file): a piece ends with `]}` written over the separator
    after its last event, and starts with `{"traceEvents":[` written over the tail of the
    previous piece.
    """
    view = memoryview(raw)
    if i == 0:
        lo = 0
    else:
        lo = cuts[i - 1][1] - len(_PIECE_HEAD)
        raw[lo:lo + len(_PIECE_HEAD)] = _PIECE_HEAD
    if i == len(cuts):
        return view[lo:]
    close = cuts[i][0] + 1
    raw[close:close + 2] = b"]}"  # over the `,` and the next byte (the next piece's, not ours)
    return view[lo:close + 2]


def merge_headers(docs: list[TraceDoc]) -> TraceDoc:
    """Header fields of a split document (whichever piece holds them), without events."""
    fields = {}
    for name in ("deviceProperties", "distributedInfo", "baseTimeNanoseconds", "goodhartProf"):
        fields[name] = next((getattr(d, name) for d in docs if getattr(d, name) is not None), None)
    return TraceDoc(traceEvents=[], **fields)
