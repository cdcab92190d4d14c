"""One big document cut into pieces that are decoded one at a time or in parallel processes.

A cut is made only between two elements of the top-level `traceEvents` array: the head (the
bytes up to the array's `[`) and the tail (from its `]`) are found first (`frame.py`) and handed
on as documents of their own with no events; every other piece is a list `[event, ...]`. A
piece that starts between two events decodes as a list only if it also ends between two events
of the same array (JSON is read the same way from the same state), so a cut that lands inside a
value (a name holding `}, {`, a nested list) makes its piece fail, and the piece is grown to the
next cut; a piece whose list closes early (`ArrayEnd`) holds the array's end, which the tail
starts from. The result is what decoding the document whole gives, whatever the cuts.
"""
from __future__ import annotations

import os
import re
from typing import Callable, Iterator

from .decode import ArrayEnd, DecodeError, TraceDoc, ambiguous
from .file_bytes import FileChanged, gunzip_limit, inflate_chunks, read_all, same_file
from .frame import HEAD_LIMIT, TAIL_LIMIT, TAIL_WINDOW, events_end, events_start, top_keys

BOUNDARY = re.compile(rb"\}\s*,\s*\{")
PIECE_BYTES = 64 << 20  # a document bigger than this is decoded piece by piece (bounded memory); the
#                         loader cuts a plain one into byte ranges of its events, one process each
TAIL_GUARD = 4 << 20  # no cut this close to the end (the fields after the events are not cut)
CUT_RETRIES = 4       # a piece that fails to decode is grown to the next cut this many times
READ_BYTES = 16 << 20


class BadCut(Exception):
    """The document cannot be cut here (no events array found, or a piece stays undecodable
    after CUT_RETRIES larger cuts): decode it whole."""


def merge_headers(docs: list[TraceDoc]) -> TraceDoc:
    """Header fields of a cut document (its head or its tail holds each), without events."""
    fields = {}
    for name in ("deviceProperties", "distributedInfo", "baseTimeNanoseconds", "goodhartProf"):
        fields[name] = next((getattr(d, name) for d in docs if getattr(d, name) is not None), None)
    return TraceDoc(traceEvents=[], **fields)


def head_doc(buf, start: int) -> bytearray:
    """The head as a document: the bytes up to the events array's `[`, then `]}`."""
    out = bytearray(memoryview(buf)[:start])
    out += b"]}"
    return out


def tail_doc(buf, end: int) -> bytearray:
    """The tail as a document: `{"traceEvents":[` then the bytes from the array's `]`."""
    out = bytearray(b'{"traceEvents":[')
    out += memoryview(buf)[end:]
    return out


def check_frame(head: bytes, tail: bytes) -> None:
    """AmbiguousDoc when the head and tail documents repeat a top-level key."""
    ambiguous((top_keys(head) or []) + (top_keys(tail) or [])[1:])


def plain_chunks(path, lo: int = 0, hi: "int | None" = None, size: int = READ_BYTES,
                 expect: "os.stat_result | None" = None) -> Iterator[bytes]:
    """Bytes lo..hi of a plain file, in reads of `size` bytes. FileChanged when the file is not
    the one `expect` describes, ends early, or changes before the last read."""
    with open(path, "rb") as fh:
        before = os.fstat(fh.fileno())
        if expect is not None and not same_file(expect, before):
            raise FileChanged(expect, before)
        fh.seek(lo)
        left = (before.st_size if hi is None else hi) - lo
        while left > 0:
            chunk = fh.read(min(size, left))
            if not chunk:
                raise FileChanged(before, os.fstat(fh.fileno()), before.st_size - left)
            left -= len(chunk)
            yield chunk
        after = os.fstat(fh.fileno())
        if not same_file(before, after):
            raise FileChanged(before, after)


def gzip_chunks(path) -> Iterator[bytes]:
    """A gzip file's inflated bytes, step by step, under `gunzip_limit` (the gzip-bomb guard)."""
    with open(path, "rb") as fh:
        data = read_all(fh)
    return inflate_chunks(data, gunzip_limit(len(data)))


def stream_pieces(chunks: Iterator[bytes], piece_bytes: int, use: Callable, starts_doc: bool = True,
                  ends_doc: bool = True) -> list:
    """Cut a stream of document bytes into pieces of about `piece_bytes` and hand each to
    `use(piece, header)` before reading the next; returns what `use` returned, in order.

    `header` True: the piece is the head or the tail document (no events); False: a list of
    events. A stream that starts the document (`starts_doc`) begins with its head; one that ends
    it (`ends_doc`) with its tail; a byte range of the events alone has neither. At most one
    piece, the bytes read ahead for its cut and `TAIL_GUARD` are held at once. A piece `use`
    rejects with DecodeError is grown to the next cut; BadCut after CUT_RETRIES."""
    cutter = _Cutter(chunks, piece_bytes, use)
    if starts_doc:
        cutter.head()
    else:
        cutter.buf = bytearray(b"[")
    return cutter.events(ends_doc)


class _Cutter:
    def __init__(self, chunks: Iterator[bytes], piece_bytes: int, use: Callable):
        self.chunks, self.piece_bytes, self.use = chunks, piece_bytes, use
        self.buf, self.more, self.results = bytearray(), True, []
        self.head_bytes = b""

    def read(self) -> bool:
        chunk = next(self.chunks, None) if self.more else None
        if chunk is None:
            self.more = False
            return False
        self.buf += chunk
        return True

    def head(self) -> None:
        """Hand on the head; `buf` then starts with the events array's `[`."""
        while True:
            start = events_start(self.buf)
            if start is not None:
                break
            if not self.read() or len(self.buf) > HEAD_LIMIT:
                raise BadCut()
        self.head_bytes = bytes(head_doc(self.buf, start))
        self.results.append(self.use(bytearray(self.head_bytes), True))
        del self.buf[:start - 1]

    def events(self, ends_doc: bool) -> list:
        search, failures = 1, 0
        while True:
            match = BOUNDARY.search(self.buf, max(self.piece_bytes, search))
            if self.more and (match is None or len(self.buf) - match.end() < TAIL_GUARD):
                self.read()
                continue
            if match is None or len(self.buf) - match.end() < TAIL_GUARD:
                return self.last(ends_doc)
            close = match.start() + 1
            rest = self.buf[close:]
            del self.buf[close:]
            self.buf += b"]"
            try:
                self.results.append(self.use(self.buf, False))
            except ArrayEnd as end:
                if not ends_doc:
                    raise DecodeError("the events array ends inside a range of its events") from None
                self.buf[close:] = rest
                return self.finish(end.at)
            except DecodeError:
                failures += 1
                if failures > CUT_RETRIES:
                    raise BadCut() from None
                self.buf[close:] = rest
                search = close
                continue
            self.buf = bytearray(b"[")
            self.buf += memoryview(rest)[match.end() - 1 - close:]
            del rest
            search, failures = 1, 0

    def last(self, ends_doc: bool) -> list:
        if not ends_doc:
            self.buf += b"]"
            self.results.append(self.use(self.buf, False))
            return self.results
        end = events_end(self.buf, 0)
        if end is None:  # not resolved from the end: the decoder finds where the array closes
            try:
                self.results.append(self.use(self.buf, False))
            except ArrayEnd as found:
                end = found.at
            else:
                raise DecodeError("no top-level fields after the events")
        return self.finish(end)

    def finish(self, end: int) -> list:
        """The events up to the array's `]` at `end`, then the tail (the rest of the stream). A
        `]` found from the end that closes a later list is found out here (ArrayEnd: earlier)."""
        while self.read():
            pass
        tail = tail_doc(self.buf, end)
        del self.buf[end + 1:]
        for _ in range(CUT_RETRIES):
            try:
                self.results.append(self.use(self.buf, False))
                break
            except ArrayEnd as found:
                if found.at >= end:
                    raise DecodeError("the events array does not end where it closes") from None
                tail = bytearray(b'{"traceEvents":[') + memoryview(self.buf)[found.at:] + memoryview(tail)[17:]
                self.buf = bytearray(memoryview(self.buf)[:found.at + 1])
                end = found.at
        else:
            raise BadCut()
        if self.head_bytes:
            check_frame(self.head_bytes, bytes(tail))
        self.results.append(self.use(tail, True))
        return self.results


def pread(src, n: int, at: int) -> bytes:
    """n bytes at offset `at` of an open file (pread: no mapping, no seek) or of a buffer."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        return bytes(memoryview(src)[at:at + n])
    return os.pread(src.fileno(), n, at)


def find_cut(fh, pos: int, limit: int, size: int = 1 << 20) -> "tuple[int, int] | None":
    """The first `}, {` between two events at or after byte `pos` of an open file (or a
    buffer), before `limit`: (index of the `}`, index of the `{`)."""
    while pos < limit:
        window = pread(fh, min(size, limit - pos) + 64, pos)
        match = BOUNDARY.search(window)
        if match is not None and pos + match.end() <= limit:
            return pos + match.start(), pos + match.end() - 1
        pos += size
    return None


def split_range(fh, start: int, end: int, parts: int, first_share: "float | None") -> list[tuple[int, int]] | None:
    """Candidate cuts between two events near each 1/parts of the events bytes start..end.
    A cut that lands inside a value is found out when its pieces are decoded."""
    first = first_share if first_share is not None else 1 / parts
    bounds = [first + (1 - first) * (k - 1) / (parts - 1) for k in range(1, parts)]
    cuts: list[tuple[int, int]] = []
    for bound in bounds:
        pos = max(start, start + int((end - start) * bound), cuts[-1][1] if cuts else 0)
        cut = find_cut(fh, pos, end)
        if cut is None:
            return None
        cuts.append(cut)
    return cuts


def file_frame(fh, size: int) -> "tuple[int, int, bytes, bytes] | None":
    """A plain file's (or a whole document buffer's) events array: (start, end, head doc, tail
    doc), read from its two ends; None when it cannot be told apart cheaply (the caller streams
    or decodes the document whole)."""
    head, start = b"", None
    while start is None and len(head) < min(size, HEAD_LIMIT):
        head = pread(fh, min(size, max(64 << 10, 4 * len(head))), 0)
        start = events_start(head)
    if start is None:
        return None
    window = TAIL_WINDOW
    while True:
        lo = max(start - 1, size - window)
        tail = pread(fh, size - lo, lo)
        if len(tail) != size - lo:
            return None
        at_opener = lo == start - 1
        end = events_end(tail, 0 if at_opener else None, partial=not at_opener)
        if end is not None:
            return start, lo + end, bytes(head_doc(head, start)), bytes(tail_doc(tail, end))
        if at_opener or window >= TAIL_LIMIT:
            return None
        window *= 8
