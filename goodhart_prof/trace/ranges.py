"""A document's events array decoded in pieces: one piece at a time (bounded memory), or in byte
ranges over worker processes, this one included, when cores are free for them.

Each piece becomes its tables (`Piece`) before the next is read. A range of a plain file is
streamed by the worker from the file itself (`file_ranges`); a document already in memory (a
gzip file inflated, a plain file read whole) is cut in place (`buffer_ranges`), and the workers,
forked after the buffer is set aside, read their range from their copy of it: nothing is pickled
on the way in, only the tables on the way back. A cut that lands inside a value is found out
when its piece decodes (pieces.py); a document that cannot be cut is decoded whole by the caller.
"""
from __future__ import annotations

import os
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TraceError
from ..textsafe import quote_path
from . import columnar, native_ranges
from .columns import new_ids
from .piece_tables import Piece
from .decode import TraceDoc, decode, decode_events
from .memory_table import memory_table
from .pieces import (PIECE_BYTES, check_frame, file_frame, gzip_chunks, merge_headers, plain_chunks,
                     split_range, stream_pieces)
from .progress import Progress
from .tables import events_table, rank_processes
from .workers import FORK, worker_pool

FIRST_PIECE_SHARE = 0.62  # measured: the worker also maps pages, pickles and ships its tables
# A document in memory at least this big is decoded in ranges over processes when more than one
# may be used and a core is free: below it, forking and shipping the tables back cost more than
# the second core saves. Measured on the 54 MB V100 trace on this project's 2-vCPU machine: load
# 0.35 -> 0.33 s (its two vCPUs run two decoders at about 0.7x the speed of one alone); more on
# machines with real cores to spare.
PARALLEL_DOC_BYTES = 24 << 20


def piece_of(raw) -> Piece:
    """A whole document, or the head or tail of a cut one (a document with no events): its
    events natively when it can (columnar.py), else by the typed msgspec decode."""
    native = columnar.document_tables(raw)
    if native is not None:
        return native
    doc, skipped = decode(raw)
    return tables_of(doc, skipped)


def events_of(raw) -> Piece:
    """A piece `[event, ...]` of a cut document's events array (natively when it can)."""
    native = columnar.events_tables(raw)
    if native is not None:
        return native
    doc, skipped = decode_events(raw)
    return tables_of(doc, skipped)


def tables_of(doc: TraceDoc, skipped: int) -> Piece:
    ids = new_ids()  # one pid, one stand-in id: in the events, frames, memory and process names
    table, frames, bad, unfit = events_table(doc, ids)
    return Piece(table, frames, rank_processes(doc, ids), merge_headers([doc]), skipped + bad,
                 memory_table(doc, ids), unfit=unfit, decoded=len(doc.traceEvents))


def stream_range(path: Path, lo: int, hi: "int | None", whole: bool, progress: "Progress | None" = None,
                 gz: bool = False, expect: "os.stat_result | None" = None,
                 piece_bytes: int = PIECE_BYTES) -> list[Piece]:
    """A document (`whole`: its head, events and tail) or bytes lo..hi of its events array,
    decoded piece by piece, each piece's tables built before the next piece is read (BadCut
    or DecodeError: the caller decodes the whole document; FileChanged, AmbiguousDoc: the error)."""
    def use(raw: bytearray, header: bool) -> Piece:
        result = piece_of(raw) if header else events_of(raw)
        if progress is not None:
            progress.add(0 if gz else len(raw), result)
        return result
    chunks = gzip_chunks(path) if gz else plain_chunks(path, lo, hi, expect=expect)
    return stream_pieces(chunks, piece_bytes, use, whole, whole)


def _buffer_range(lo: int, hi: int, piece_bytes: int) -> list[Piece]:
    """Bytes lo..hi of the events array of the buffer set aside (`_SHARED`), piece by piece."""
    view = memoryview(_SHARED[0])[lo:hi]
    return stream_pieces(iter([view]), piece_bytes, lambda raw, header: events_of(raw), False, False)


_SHARED: list = []  # the document buffer_ranges cuts; forked workers inherit it


def _shipped(results: list[Piece]) -> list[Piece]:
    """Frame names travel back as one joined string: pickling a million str objects one by one
    costs more than decoding them did."""
    for result in results:
        result.frames.columns["name"] = PackedNames("\0".join(result.frames.columns["name"].tolist()))
    return results


def _file_range_worker(path: Path, lo: int, hi: int, expect: os.stat_result, piece_bytes: int) -> list[Piece]:
    """Worker: bytes lo..hi of a plain file's events array."""
    return _shipped(stream_range(path, lo, hi, False, expect=expect, piece_bytes=piece_bytes))


def _buffer_range_worker(lo: int, hi: int, piece_bytes: int) -> list[Piece]:
    """Worker: bytes lo..hi of the document buffer_ranges set aside before forking it."""
    return _shipped(_buffer_range(lo, hi, piece_bytes))


class PackedNames(str):
    def unpack(self) -> np.ndarray:
        names = self.split("\0") if self else []
        out = np.empty(len(names), dtype=object)
        out[:] = names
        return out


def _unpacked(result: Piece) -> Piece:
    names = result.frames.columns["name"]
    if isinstance(names, PackedNames):
        result.frames.columns["name"] = names.unpack()
    return result


def _cuts(src, start: int, end: int, parts: int) -> "tuple[list[int], list[int]] | None":
    cuts = split_range(src, start, end, parts, FIRST_PIECE_SHARE if parts == 2 else None)
    if not cuts:
        return None
    los = [start] + [o for _, o in cuts]         # a range starts at its first event's `{`
    his = [c + 1 for c, _ in cuts] + [end]      # and ends after its last event's `}`
    return los, his


def file_ranges(path: Path, before: os.stat_result, frame: tuple, parts: int, progress,
                piece_bytes: int = PIECE_BYTES) -> "list[Piece] | None":
    """A plain file's events array cut into `parts` byte ranges between events, streamed in as
    many processes (this one included, with the larger first range); its head and tail decoded
    here. None if it cannot be cut."""
    start, end, head, tail = frame
    with open(path, "rb") as fh:
        ranges = _cuts(fh, start, end, parts)
    if ranges is None:
        return None
    check_frame(head, tail)
    los, his = ranges
    outer = [piece_of(head), piece_of(tail)]
    with _pool(path, len(los) - 1) as pool:
        futures = [pool.submit(_file_range_worker, path, lo, hi, before, piece_bytes)
                   for lo, hi in zip(los[1:], his[1:])]
        first = stream_range(path, los[0], his[0], False, progress, expect=before, piece_bytes=piece_bytes)
        rest = _results(path, futures)
    return outer[:1] + first + rest + outer[1:]


def native_file_ranges(path: Path, before: os.stat_result, frame: tuple, progress) -> "list[Piece] | None":
    """A plain file's events read natively in windows on two threads (native_ranges.py), its
    head and tail decoded here; None when the native decoder does not read them all."""
    start, end, head, tail = frame
    check_frame(head, tail)
    read = native_ranges.file_events(path, before, start, end, progress)
    if read is None:
        return None
    return [piece_of(head)] + read + [piece_of(tail)]


def buffer_ranges(path: Path, raw, parts: int, piece_bytes: int = PIECE_BYTES) -> "list[Piece] | None":
    """A whole document in memory (`raw`) cut into `parts` ranges of its events array, decoded in
    as many processes (this one included), or None when it cannot be cut (or no process can be
    forked to share it: the caller decodes it whole)."""
    if not FORK or parts < 2 or len(raw) < PARALLEL_DOC_BYTES or not _core_free():
        return None
    if columnar.AVAILABLE:  # one native pass beats a fork and shipping tables back (V100: 0.30 -> 0.22 s)
        return None
    frame = file_frame(raw, len(raw))
    if frame is None:
        return None
    start, end, head, tail = frame
    ranges = _cuts(raw, start, end, parts)
    if ranges is None:
        return None
    check_frame(head, tail)
    los, his = ranges
    _SHARED[:] = [raw]
    try:
        with _pool(path, len(los) - 1) as pool:  # forked on submit: after the buffer is set aside
            futures = [pool.submit(_buffer_range_worker, lo, hi, piece_bytes) for lo, hi in zip(los[1:], his[1:])]
            first = _buffer_range(los[0], his[0], piece_bytes)
            rest = _results(path, futures)
    finally:
        _SHARED.clear()
    return [piece_of(head)] + first + rest + [piece_of(tail)]


def _core_free() -> bool:
    """Whether a second core is free for a worker (the 1-minute load average, this process
    included, under the core count less one half): on a saturated machine a forked decoder only
    competes with this one (measured: the V100 trace 0.71 -> 0.93 s on two busy cores)."""
    try:
        return os.getloadavg()[0] < (os.cpu_count() or 1) - 0.5
    except (OSError, AttributeError):  # no load average (Windows): forking is not used there anyway
        return True


class _pool:
    """The worker pool, whose death (killed, out of memory) is a TraceError naming the file."""

    def __init__(self, path: Path, n: int):
        self.path, self.pool = path, worker_pool(n)

    def __enter__(self):
        return self.pool

    def __exit__(self, kind, exc, tb) -> Any:
        self.pool.shutdown(wait=True, cancel_futures=True)
        if isinstance(exc, BrokenProcessPool):
            raise TraceError(f"{quote_path(self.path)}: a decode worker process died while reading it (killed, "
                             f"or out of memory)") from None
        return False


def _results(path: Path, futures: list) -> list[Piece]:
    return [_unpacked(p) for f in futures for p in f.result()]


__all__ = ["Piece", "piece_of", "events_of", "tables_of", "stream_range", "file_ranges", "native_file_ranges", "buffer_ranges",
           "PackedNames", "FIRST_PIECE_SHARE", "PARALLEL_DOC_BYTES"]
