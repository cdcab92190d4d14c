"""A trace file's bytes: read whole (FileChanged when the file changes under the reader) and, when
the bytes say gzip, inflated in bounded steps (a gzip bomb is refused before it takes the memory)."""
from __future__ import annotations

import os
import zlib
from typing import Iterator

from .decode import DecodeError

GZIP_MAGIC = b"\x1f\x8b"

try:  # ISA-L's gunzip is about twice as fast as zlib's; same format, same API
    from isal.isal_zlib import decompressobj as _decompressobj, error as _GzipError
except ImportError:  # pragma: no cover - isal is a dependency, but only a speed-up
    from zlib import decompressobj as _decompressobj, error as _GzipError

GUNZIP_CHUNK = 64 << 20
GUNZIP_FLOOR = 1 << 30   # any gzip trace may expand to this much ...
GUNZIP_RATIO = 256       # ... and beyond it to this many times its size (JSON traces: 10-30x)


def gunzip_limit(compressed: int) -> int:
    """How far a gzip file of `compressed` bytes may expand: a gzip bomb (deflate reaches 1000x)
    stops here, long before memory runs out. Real traces compress 10-30x; a third of the
    machine's memory is the hard cap (decoding needs about twice the document besides)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux/macOS
        memory = 1 << 36
    return min(memory // 3, max(GUNZIP_FLOOR, GUNZIP_RATIO * compressed))


def inflate_chunks(data: bytes, limit: int, chunk_bytes: int = GUNZIP_CHUNK) -> Iterator[bytes]:
    """The inflated bytes of all gzip members of `data`, chunk by chunk, refusing to expand past
    `limit` bytes. Every failure is a DecodeError."""
    total = 0
    try:
        while data:
            inflater = _decompressobj(wbits=31)
            tail = data
            while not inflater.eof:
                chunk = inflater.decompress(tail, chunk_bytes)
                if not chunk and len(inflater.unconsumed_tail) == len(tail):
                    raise DecodeError("truncated or corrupt gzip data (it ends too early)")
                tail = inflater.unconsumed_tail
                total += len(chunk)
                if total > limit:
                    raise DecodeError(f"gzip data expands past {limit / 2**30:.1f} GiB (a gzip bomb, "
                                      f"or a trace too big for this machine's memory)")
                yield chunk
            data = inflater.unused_data
            if data[:2] != GZIP_MAGIC and not data.strip(b"\0"):
                break  # padding after the last member
            if data[:2] != GZIP_MAGIC:
                raise DecodeError("corrupt gzip data (bytes after the end of the gzip stream)")
    except (EOFError, OSError, zlib.error, _GzipError) as exc:
        raise DecodeError(f"truncated or corrupt gzip data ({exc})") from None


def gunzip(data: bytes, limit: int) -> "bytes | bytearray":
    """All gzip members of `data`, refusing to expand past `limit` bytes.

    A document that inflates in one chunk comes back as that chunk (bytes: copying 54 MB into a
    bytearray would cost as much as inflating them); a longer one in a bytearray."""
    out: "bytes | bytearray" = b""
    for chunk in inflate_chunks(data, limit):
        if not out:
            out = chunk
        else:
            if out.__class__ is not bytearray:
                out = bytearray(out)
            out += chunk
    return out


class FileChanged(DecodeError):
    """The file changed while it was read (truncated by `cp`, rewritten by a profiler)."""

    def __init__(self, before: os.stat_result, after: "os.stat_result | None", got: "int | None" = None):
        now = f"{after.st_size:,} bytes now" if after is not None else "gone now"
        read = f", read {got:,}" if got is not None else ""
        super().__init__(f"changed while being read ({before.st_size:,} bytes when opened{read}, {now}); "
                         "load it again once it is complete")


def same_file(before: os.stat_result, after: os.stat_result) -> bool:
    return (before.st_size, before.st_mtime_ns, before.st_ino) == (after.st_size, after.st_mtime_ns, after.st_ino)


def read_all(fh, before: "os.stat_result | None" = None) -> bytes:
    """The whole of an open file, read (not mapped: a mapped file truncated under the reader kills
    it with SIGBUS); FileChanged when its size or time changes before the read ends."""
    before = before or os.fstat(fh.fileno())
    data = fh.read()
    after = os.fstat(fh.fileno())
    if len(data) != before.st_size or not same_file(before, after):
        raise FileChanged(before, after, len(data))
    return data


def read_bytes(path) -> "bytes | bytearray":
    """File contents, gunzipped when the bytes (not the suffix) say gzip. FileChanged when the file
    changes while it is read."""
    with open(path, "rb") as fh:
        before = os.fstat(fh.fileno())
        data = read_all(fh, before)
    if data[:2] == GZIP_MAGIC:
        return gunzip(data, gunzip_limit(len(data)))
    return data
