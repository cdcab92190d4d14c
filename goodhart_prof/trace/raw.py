"""Trace files as raw documents, for writers that must re-emit the original events (the rank
merge, the Chrome JSON export). Analyses never use this: they read `Trace` tables."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from .decode import DecodeError, parse_json
from .file_bytes import read_bytes
from ..textsafe import quote_path


class RawTraceError(ValueError):
    """The file cannot be read back as a trace document (message is one line)."""


def read_document(path: Path) -> dict[str, Any]:
    """The whole document as Python objects. Events that are not JSON objects, or that cannot
    be decoded alone (bad UTF-8, numbers out of range), are left out, as the loader skips them;
    so is a header field that cannot be decoded."""
    top = raw_document(path)
    doc: dict[str, Any] = {}
    for key, value in top.items():
        try:
            doc[key] = msgspec.json.decode(value)
        except (msgspec.ValidationError, UnicodeDecodeError):
            if key == "traceEvents":
                doc[key] = _good_events(value)
    if not isinstance(doc.get("traceEvents"), list):  # pragma: no cover - raw_document checked it
        raise RawTraceError(f"{quote_path(path)}: not a trace (no traceEvents list)")
    if not all(ev.__class__ is dict for ev in doc["traceEvents"]):
        doc["traceEvents"] = [ev for ev in doc["traceEvents"] if isinstance(ev, dict)]
    return doc


def _good_events(events: msgspec.Raw) -> list[dict[str, Any]]:
    good = []
    for ev in msgspec.json.decode(events, type=list[msgspec.Raw]):
        try:
            good.append(msgspec.json.decode(ev))
        except (msgspec.ValidationError, UnicodeDecodeError):
            continue
    return good


def raw_document(path: Path) -> dict[str, msgspec.Raw]:
    """Top-level fields as raw JSON (validated, not turned into objects)."""
    try:
        doc = parse_json(read_bytes(path), type=dict[str, msgspec.Raw])
    except msgspec.ValidationError:
        raise RawTraceError(f"{quote_path(path)}: not a trace (the top level is not an object)") from None
    except (DecodeError, msgspec.DecodeError, OSError) as exc:
        raise RawTraceError(f"{quote_path(path)}: cannot be read ({exc})") from None
    events = bytes(doc.get("traceEvents", b"")).strip()
    if not (events.startswith(b"[") and events.endswith(b"]")):
        raise RawTraceError(f"{quote_path(path)}: not a trace (no traceEvents list)")
    return doc
