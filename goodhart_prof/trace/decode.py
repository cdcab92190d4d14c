"""Bytes of a Chrome/Kineto trace -> typed msgspec structs holding only the fields we use.

This is the only place that parses JSON. Events keep `ph`, `cat`, `name`, `pid`, `tid`, `ts`,
`dur` and the few `args` keys the analyses need; everything else is skipped by the decoder
without building Python objects for it.
"""
from __future__ import annotations

import gzip
import zlib
from typing import Any, Union

import msgspec

Scalar = Union[int, float, str, None]


class Args(msgspec.Struct, frozen=True, gc=False):
    device: Scalar = None
    stream: Scalar = None
    correlation: Scalar = None
    external_id: Scalar = msgspec.field(default=None, name="External id")
    external_id_2021: Scalar = msgspec.field(default=None, name="external id")
    python_id: Scalar = msgspec.field(default=None, name="Python id")
    python_parent_id: Scalar = msgspec.field(default=None, name="Python parent id")
    bytes: Scalar = None
    process_name: Scalar = msgspec.field(default=None, name="name")  # metadata events only
    labels: Scalar = None


class Event(msgspec.Struct, frozen=True, gc=False):
    ph: str = ""
    cat: Scalar = None
    name: Scalar = None
    pid: Scalar = None
    tid: Scalar = None
    ts: Union[int, float, None] = None
    dur: Union[int, float, None] = None
    args: Union[Args, None] = None


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


def read_bytes(path) -> bytes:
    """File contents, gunzipped when the bytes (not the suffix) say gzip."""
    with open(path, "rb") as fh:
        raw = fh.read()
    if raw[:2] == GZIP_MAGIC:
        try:
            return gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise DecodeError(f"truncated or corrupt gzip data ({exc})") from None
    return raw


def decode(raw: bytes) -> tuple[TraceDoc, int]:
    """The typed document and how many malformed events were skipped to get it."""
    if not raw.strip():
        raise DecodeError("empty file")
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
            skipped += 1
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
