"""Trace files as raw documents, for writers that must re-emit the original events (the rank
merge, the Chrome JSON export). Analyses never use this: they read `Trace` tables."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from .decode import DecodeError, read_bytes


class RawTraceError(ValueError):
    """The file cannot be read back as a trace document (message is one line)."""


def read_document(path: Path) -> dict[str, Any]:
    """The whole document as Python objects."""
    try:
        doc = msgspec.json.decode(read_bytes(path))
    except (DecodeError, msgspec.DecodeError, OSError) as exc:
        raise RawTraceError(f"{path}: cannot be read ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise RawTraceError(f"{path}: not a trace (no traceEvents list)")
    return doc


def raw_document(path: Path) -> dict[str, msgspec.Raw]:
    """Top-level fields as raw JSON (validated, not turned into objects)."""
    try:
        doc = msgspec.json.decode(read_bytes(path), type=dict[str, msgspec.Raw])
    except (DecodeError, msgspec.DecodeError, OSError) as exc:
        raise RawTraceError(f"{path}: cannot be read ({exc})") from None
    events = bytes(doc.get("traceEvents", b"")).strip()
    if not (events.startswith(b"[") and events.endswith(b"]")):
        raise RawTraceError(f"{path}: not a trace (no traceEvents list)")
    return doc
