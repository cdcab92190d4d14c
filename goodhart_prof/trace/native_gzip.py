"""A gzip document read natively while it is inflated: ISA-L inflates on one thread (it releases
the GIL), and the events are parsed in parts of ~PART_BYTES (2 to 8, cut between events), each on
one of PARSERS pool threads as soon as the inflating has reached it; the last part once the
inflating ends; the parts' columns joined once (`columnar.join`). On the V100 trace (3 MB of gzip,
54 MB of JSON: 4 parts) the inflating and the parsing overlap instead of running one after the
other (docs/benchmarks.md).

Only documents that inflate to between PARALLEL_BYTES and PIECE_BYTES go this way (their size is
in the gzip trailer); anything unexpected (a document bigger than it said, an error while
inflating, a head or tail not found cheaply, a part the decoder hands back) returns None and the
loader reads the file as before, which gives the same tables or the error.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import columnar
from .piece_tables import Piece
from .decode import DecodeError, decode
from .file_bytes import GZIP_MAGIC, gunzip_limit, inflate_chunks, read_all
from .frame import events_end, events_start
from .pieces import BOUNDARY, PIECE_BYTES, check_frame, head_doc, merge_headers, tail_doc

CHUNK_BYTES = 4 << 20  # inflated a step at a time, so the parts' parse can start early
TAIL_BYTES = 1 << 20   # the fields after the events are looked for in this much of the end


class _Inflated:
    """The inflated chunks so far, filled by a thread of their own."""

    def __init__(self, data: bytes, limit: int):
        self.chunks: list[bytes] = []
        self.total = 0
        self.finished = False
        self.failed = False
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._run, args=(data, limit), name="goodhart-prof-inflate", daemon=True)
        self.thread.start()

    def _run(self, data: bytes, limit: int) -> None:
        try:
            for chunk in inflate_chunks(data, limit, CHUNK_BYTES):
                with self.cond:
                    self.chunks.append(chunk)
                    self.total += len(chunk)
                    self.cond.notify_all()
                if self.total > PIECE_BYTES:  # bigger than its trailer said: the piece-by-piece way
                    self.failed = True
                    break
        except DecodeError:
            self.failed = True
        finally:
            with self.cond:
                self.finished = True
                self.cond.notify_all()

    def wait_for(self, nbytes: int) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.finished or self.total >= nbytes)


def document(path: Path) -> "Piece | None":
    """The tables of a gzip file's document, or None (the loader's other ways read it)."""
    if not columnar.AVAILABLE:
        return None
    try:
        with open(path, "rb") as fh:
            data = read_all(fh)
    except OSError:
        return None
    if len(data) < 18 or data[:2] != GZIP_MAGIC:
        return None
    size = int.from_bytes(data[-4:], "little")  # the last member's size, mod 2^32
    if not columnar.PARALLEL_BYTES <= size <= PIECE_BYTES:
        return None
    inflated = _Inflated(data, gunzip_limit(len(data)))
    try:
        return _read(inflated, size)
    finally:
        inflated.thread.join()


def _read(inflated: _Inflated, size: int) -> "Piece | None":
    """The events in parts (`_parts`), each parsed on a pool thread as soon as it is inflated,
    the last once the inflating ends; None where anything is not as expected."""
    n = _parts(size)
    inflated.wait_for(size // n)
    with inflated.cond:
        chunks = list(inflated.chunks)
    if not chunks or chunks[0][:3] == b"\xef\xbb\xbf":
        return None
    lo = events_start(chunks[0])
    if lo is None:
        return None
    with ThreadPoolExecutor(PARSERS) as pool:
        parsed = []
        for k in range(1, n):
            cut = _next_cut(inflated, size * k // n, lo)
            if cut is None:
                break
            parsed.append(pool.submit(columnar.parse, list(inflated.chunks), lo, cut[0] + 1))
            lo = cut[1]
        inflated.wait_for(1 << 62)
        if inflated.failed:
            return None
        chunks, total = inflated.chunks, inflated.total
        last, end = _tail(chunks)
        at = total - len(last)  # where `last` starts in the document
        if end is None or at + end <= lo:
            return None
        parsed.append(pool.submit(columnar.parse, chunks, lo, at + end))
        parts = [f.result() for f in parsed]
    if any(p is None for p in parts):
        return None
    head, tail = bytes(head_doc(chunks[0], events_start(chunks[0]))), bytes(tail_doc(last, end))
    try:
        check_frame(head, tail)
        header = merge_headers([decode(head)[0], decode(tail)[0]])
    except DecodeError:
        return None
    return columnar.tables(columnar.join(*parts), header)


PART_BYTES = 12 << 20  # inflated bytes per part parsed (the V100 trace's 54 MB: 4 parts)
PARSERS = 2            # threads parsing parts, beside the one inflating


def _tail(chunks: list[bytes]) -> "tuple[bytes, int | None]":
    """The document's last bytes (at least TAIL_BYTES where there are) and the index in them of
    the events' `]`; a tail that does not resolve it (it starts inside a string's escapes, or at
    a quote) is widened by a chunk, twice at most."""
    last = chunks[-1] if len(chunks[-1]) >= TAIL_BYTES or len(chunks) < 2 else \
        bytes(memoryview(chunks[-2])[-TAIL_BYTES:]) + chunks[-1]
    end = events_end(last, None, partial=True)
    for k in (2, 3):
        if end is not None or len(chunks) < k:
            break
        last = b"".join(chunks[-k:])
        end = events_end(last, None, partial=True)
    return last, end


def _parts(size: int) -> int:
    return max(2, min(8, size // PART_BYTES))


def _next_cut(inflated: _Inflated, at: int, lo: int) -> "tuple[int, int] | None":
    """The first boundary between events at or after byte `at` (and after `lo`), waiting for the
    inflating to reach it; None when the document ends first."""
    need = at + 1
    while True:
        inflated.wait_for(need)
        with inflated.cond:
            chunks, done = list(inflated.chunks), inflated.finished
        cut = _cut_after(chunks, max(at, lo))
        if cut is not None or done:
            return cut
        need = sum(len(c) for c in chunks) + CHUNK_BYTES


def _cut_after(chunks: list[bytes], at: int) -> "tuple[int, int] | None":
    """The first `}, {` at or after byte `at` of the chunks read as one, within one chunk:
    (index of the `}`, index of the `{`)."""
    offset = 0
    for chunk in chunks:
        if offset + len(chunk) > at:
            found = BOUNDARY.search(chunk, max(0, at - offset))
            if found is not None:
                return offset + found.start(), offset + found.end() - 1
        offset += len(chunk)
    return None
