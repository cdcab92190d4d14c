"""File or folder -> `Trace`: each file decoded (a big one piece by piece, a plain one in byte
ranges over worker processes) into its tables, then the files assembled. Which rank each file
holds (distributedInfo, merged process names, file names, or file order) is file_ranks.py's."""
from __future__ import annotations

import os
import resource
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import TraceError
from . import times
from .columns import new_ids
from .decode import AmbiguousDoc, DecodeError, TraceDoc, decode, decode_events
from .file_bytes import GZIP_MAGIC, FileChanged, read_bytes
from .file_ranks import file_rank, header_rank, rank_evidence, ranks_of_many, world_size
from .memory_table import concat_memory, empty_memory, memory_table
from .model import Frames, LoadCost, Trace
from .pieces import (PIECE_BYTES, BadCut, check_frame, file_frame, gzip_chunks, merge_headers, plain_chunks,
                     split_range, stream_pieces)
from .progress import Progress, progress_bar
from .tables import assign_ranks, concat_tables, events_table, rank_processes
from .workers import worker_pool
from ..textsafe import quote_path

PROGRESS_BYTES = 50 * 1024 * 1024  # inputs over ~50 MB get a progress bar
PARALLEL_BYTES = 8 * 1024 * 1024   # below this, worker processes cost more than they save
TRIM_EVENTS = 1_000_000  # a load this big gives its freed heap back once assembled (4 GB trace: 1.55 -> 0.93 GB RSS)
FIRST_PIECE_SHARE = 0.62  # measured: the worker also maps pages, pickles and ships its tables
NOT_TRACES = {"run.json"}


@dataclass
class FileResult:
    """One file loaded: its tables and what it says about its rank (file_ranks.py reads those)."""

    path: Path
    table: pd.DataFrame
    frames: Frames
    rank: int | None                 # from distributedInfo
    merged_ranks: list[int]          # from process names `rank <r>` (merged traces; None: rank)
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0
    base_ns: int | None = None
    warnings: list[str] = field(default_factory=list)
    memory: pd.DataFrame = field(default_factory=empty_memory)
    world_size: int | None = None    # from distributedInfo
    unfit: int = 0                   # of `skipped`: times that do not fit the trace (times.py)


def trace_files(path: Path) -> list[Path]:
    """The trace files a path stands for (a folder's per-rank traces win over its merged one)."""
    try:
        if path.is_file():
            return [path]
        if not path.exists():
            raise TraceError(f"{quote_path(path)}: no such file or folder")
        if not path.is_dir():  # a FIFO or a device would block or never end: refused
            raise TraceError(f"{quote_path(path)}: not a file or folder")
        found = sorted(p for p in path.iterdir() if p.is_file() and p.name not in NOT_TRACES
                       and (p.name.endswith(".json") or p.name.endswith(".json.gz")))
    except OSError as exc:  # an unreadable folder, a name too long, ...
        raise TraceError(f"{quote_path(path)}: cannot read ({exc.strerror or exc})") from None
    per_rank = [p for p in found if p.name != "merged_trace.json"]
    found = per_rank or found
    if not found:
        raise TraceError(f"{quote_path(path)}: folder holds no trace files (*.json, *.json.gz)")
    return found


@dataclass
class _Piece:
    table: pd.DataFrame
    frames: Frames
    pid_rank: dict[int, int]
    header: TraceDoc
    skipped: int
    memory: pd.DataFrame
    unfit: int = 0    # of `skipped`: beyond 2^53 us (times.fits)
    decoded: int = 0  # events the piece decoded (any phase)


def _piece_of(raw) -> _Piece:
    """A whole document, or the head or tail of a cut one (a document with no events)."""
    doc, skipped = decode(raw)
    return _tables_of(doc, skipped)


def _events_of(raw) -> _Piece:
    """A piece `[event, ...]` of a cut document's events array."""
    doc, skipped = decode_events(raw)
    return _tables_of(doc, skipped)


def _tables_of(doc: TraceDoc, skipped: int) -> _Piece:
    ids = new_ids()  # one pid, one stand-in id: in the events, frames, memory and process names
    table, frames, bad, unfit = events_table(doc, ids)
    return _Piece(table, frames, rank_processes(doc, ids), merge_headers([doc]), skipped + bad,
                  memory_table(doc, ids), unfit=unfit, decoded=len(doc.traceEvents))


def _stream_range(path: Path, lo: int, hi: "int | None", whole: bool, progress: "Progress | None" = None,
                  gz: bool = False, expect: "os.stat_result | None" = None) -> list[_Piece]:
    """A document (`whole`: its head, events and tail) or bytes lo..hi of its events array,
    decoded piece by piece, each piece's tables built before the next piece is read (BadCut
    or DecodeError: the caller decodes the whole document; FileChanged, AmbiguousDoc: the error)."""
    def use(raw: bytearray, header: bool) -> _Piece:
        result = _piece_of(raw) if header else _events_of(raw)
        if progress is not None:
            progress.add(0 if gz else len(raw), result)
        return result
    chunks = gzip_chunks(path) if gz else plain_chunks(path, lo, hi, expect=expect)
    return stream_pieces(chunks, PIECE_BYTES, use, whole, whole)


def _range_worker(path: Path, lo: int, hi: int, expect: os.stat_result) -> list[_Piece]:
    """Worker: bytes lo..hi of the events array. Frame names travel back as one joined string:
    pickling a million str objects one by one costs more than decoding them did."""
    results = _stream_range(path, lo, hi, False, expect=expect)
    for result in results:
        result.frames.columns["name"] = _PackedNames("\0".join(result.frames.columns["name"].tolist()))
    return results


def _streamed(path: Path, parts: int, progress: "Progress | None") -> "tuple[list[_Piece] | None, Any]":
    """A document over PIECE_BYTES, piece by piece (a plain one in `parts` byte ranges of its
    events, one per process): (pieces, None). A smaller one: (None, its bytes, or None to read
    them); so is one that cannot be cut between events (decoded whole, with the same errors)."""
    try:
        with open(path, "rb") as fh:
            before = os.fstat(fh.fileno())
            gz = os.pread(fh.fileno(), 2, 0) == GZIP_MAGIC
            if gz:
                return _streamed_gzip(path, progress)
            if before.st_size <= PIECE_BYTES:
                return None, None
            frame = file_frame(fh, before.st_size) if parts > 1 else None
    except OSError:
        return None, None  # `read_bytes` says why
    try:
        if frame is not None:
            try:
                ranged = _ranges_load(path, before, frame, parts, progress)
                if ranged is not None:
                    return ranged, None
            except _FATAL:
                raise
            except (BadCut, DecodeError):
                pass  # a range that cannot be cut there: the document in one process
        return _stream_range(path, 0, None, True, progress, expect=before), None
    except _FATAL:
        raise
    except (BadCut, DecodeError, OSError):
        return None, None


_FATAL = (FileChanged, AmbiguousDoc)


def _streamed_gzip(path: Path, progress: "Progress | None") -> "tuple[list[_Piece] | None, Any]":
    """A gzip file: inflated in steps; a document over PIECE_BYTES is decoded piece by piece
    (inflated again: cheap beside decoding), a smaller one comes back as `read_bytes` gives it."""
    head: list[bytes] = []
    total = 0
    try:
        for chunk in gzip_chunks(path):
            head.append(chunk)
            total += len(chunk)
            if total > PIECE_BYTES:
                break
        else:
            return None, (head[0] if len(head) == 1 else bytearray().join(head)) if head else b""
        del head
        return _stream_range(path, 0, None, True, progress, gz=True), None
    except _FATAL:
        raise
    except (BadCut, DecodeError, OSError):
        return None, None


def _ranges_load(path: Path, before: os.stat_result, frame: tuple, parts: int, progress) -> "list[_Piece] | None":
    """A plain document's events array cut into `parts` byte ranges between events, streamed in
    as many processes (this one included, with the larger first range); its head and tail
    decoded here. None if it cannot be cut."""
    start, end, head, tail = frame
    with open(path, "rb") as fh:
        cuts = split_range(fh, start, end, parts, FIRST_PIECE_SHARE if parts == 2 else None)
    if not cuts:
        return None
    check_frame(head, tail)
    los = [start] + [o for _, o in cuts]         # a range starts at its first event's `{`
    his = [c + 1 for c, _ in cuts] + [end]      # and ends after its last event's `}`
    outer = [_piece_of(head), _piece_of(tail)]
    try:
        with worker_pool(len(cuts)) as pool:
            futures = [pool.submit(_range_worker, path, lo, hi, before) for lo, hi in zip(los[1:], his[1:])]
            first = _stream_range(path, los[0], his[0], False, progress, expect=before)
            rest = [_unpacked(p) for f in futures for p in f.result()]
    except BrokenProcessPool:
        raise TraceError(f"{quote_path(path)}: a decode worker process died while reading it (killed, or out of "
                         f"memory)") from None
    return outer[:1] + first + rest + outer[1:]


class _PackedNames(str):
    def unpack(self) -> np.ndarray:
        names = self.split("\0") if self else []
        out = np.empty(len(names), dtype=object)
        out[:] = names
        return out


def _unpacked(result: _Piece) -> _Piece:
    names = result.frames.columns["name"]
    if isinstance(names, _PackedNames):
        result.frames.columns["name"] = names.unpack()
    return result


def _load_file(path: Path, default_rank: int, parts: int = 1, progress: "Progress | None" = None) -> FileResult:
    try:
        pieces, raw = _streamed(path, parts, progress)
        if pieces is None and raw is None:
            raw = read_bytes(path)
        pieces = pieces or [_piece_of(raw)]
    except DecodeError as exc:
        raise TraceError(f"{quote_path(path)}: {exc}") from None
    except OSError as exc:
        raise TraceError(f"{quote_path(path)}: cannot read ({exc.strerror or exc})") from None
    del raw
    if len(pieces) > 1:
        _trim_heap()  # the pieces' decoded structs are gone: the tables to come reuse the pages
        skipped = sum(p.skipped for p in pieces)
        if skipped and not sum(p.decoded for p in pieces):  # as a whole decode says it
            raise TraceError(f"{quote_path(path)}: not a trace: none of its {skipped} events is well-formed")
    header = merge_headers([p.header for p in pieces])
    pid_rank = {k: v for p in pieces for k, v in p.pid_rank.items()}
    table = concat_tables([p.table for p in pieces], sort=False)
    frames = Frames.concat([p.frames for p in pieces], sort=False)
    memory = concat_memory([p.memory for p in pieces], sort=False)
    beyond = sum(p.unfit for p in pieces)
    table, frames, too_long = _drop_too_long(table, frames)
    _check_time_base(path, table, beyond, too_long)
    warnings = []
    info_rank = header_rank(path, header, warnings)
    info_rank, pid_rank = rank_evidence(path, info_rank, pid_rank, warnings)
    if not len(table):
        warnings.append(f"{path.name}: no events")
    assign_ranks(table, frames, pid_rank, info_rank if info_rank is not None else default_rank, memory)
    return FileResult(path, table, frames, info_rank, sorted(set(pid_rank.values())),
                      list(header.deviceProperties or []), sum(p.skipped for p in pieces) + too_long,
                      header.baseTimeNanoseconds, warnings, memory, world_size(header),
                      beyond + too_long)


def _drop_too_long(table: pd.DataFrame, frames: Frames) -> tuple[pd.DataFrame, Frames, int]:
    """The file's events and frames less those that last longer than its starts allow
    (`times.duration_limit`: a whole-file rule, so it runs once the pieces are joined)."""
    limit = times.duration_limit([table["ts"].to_numpy(), frames["ts"]])
    rows = times.too_long(table["dur"].to_numpy(), limit)
    frame_rows = times.too_long(frames["dur"], limit)
    if len(rows):
        keep = np.ones(len(table), dtype=bool)
        keep[rows] = False
        table = table.iloc[np.flatnonzero(keep)].reset_index(drop=True)
    if len(frame_rows):
        frames = frames.take(np.setdiff1d(np.arange(len(frames)), frame_rows))
    return table, frames, len(rows) + len(frame_rows)


def _check_time_base(path: Path, table: pd.DataFrame, beyond: int, too_long: int) -> None:
    """A file left without events because of their times says why (not a bare `no events`)."""
    if len(table):
        return
    if beyond:
        raise TraceError(f"{quote_path(path)}: the trace's time base cannot be represented: {beyond:,} event(s) "
                         f"start or end beyond 2^53 us ({times.MAX_ABS_US:.4g} us), where a double "
                         "no longer holds whole microseconds")
    if too_long:
        raise TraceError(f"{quote_path(path)}: no events left: {too_long:,} event(s) last longer than "
                         f"{times.DUR_RATIO:,.0f}x the span of the trace's starts and a day")


def _trim_heap() -> None:
    """Give the heap pages the decoded pieces freed back to the OS (glibc keeps them otherwise,
    and the analyses would then stack their tables above them)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def load(path: str | os.PathLike, progress: bool | None = None, workers: int | None = None,
         strict: bool = False) -> Trace:
    """Load a trace file, a merged trace, or a folder of per-rank traces.

    A folder's rank file that cannot be read is skipped with a warning naming it, and the other
    ranks are loaded; with `strict` (or when no rank file loads) its error stops the load."""
    started = time.perf_counter()
    path = Path(path)
    files = trace_files(path)
    try:
        sizes = [f.stat().st_size for f in files]
    except OSError as exc:
        raise TraceError(f"{quote_path(exc.filename)}: cannot read ({exc.strerror})") from None
    total = sum(sizes)
    show = total > PROGRESS_BYTES if progress is None else progress
    bar = progress_bar(len(files), total, show)
    try:
        outcomes = _load_all(files, sizes, workers, bar, strict)
    finally:
        if bar is not None:
            bar.close()
    return finish(path, files, outcomes, strict, started=started)


def load_rank_file(path: Path, default_rank: int) -> "FileResult | TraceError":
    """One file of a folder, as a folder load reads it: its tables, or the error that names it."""
    try:
        return _load_file(path, default_rank)
    except TraceError as exc:
        return exc


def finish(path: Path, files: list[Path], outcomes: list, strict: bool = False,
           first_warnings: list[str] | None = None, started: float | None = None) -> Trace:
    """The `Trace` of a path from its files' outcomes (each a `FileResult` or the `TraceError`
    that stopped it); every load path ends here, the cluster's too."""
    failed = [(f, o) for f, o in zip(files, outcomes) if isinstance(o, Exception)]
    if failed and (strict or len(failed) == len(outcomes)):
        raise failed[0][1]
    warnings = list(first_warnings or [])
    warnings += [f"skipped rank file {_reason(f, exc)} (the other ranks are analysed; "
                 "--strict stops instead)" for f, exc in failed]
    kept = [(f, o) for f, o in zip(files, outcomes) if not isinstance(o, Exception)]
    trace = _assemble([f for f, _ in kept], [o for _, o in kept])
    trace.warnings[:0] = warnings
    if not len(trace.events):
        skipped = f"; {trace.skipped_events:,} malformed event(s) skipped" if trace.skipped_events else ""
        raise TraceError(f"{quote_path(path)}: no events (no complete 'ph: X' events to analyse{skipped})")
    if len(trace.events) > TRIM_EVENTS:
        _trim_heap()  # the pieces' tables are concatenated: their pages go back before the analyses
    if started is not None:  # what the load cost this process (and its worker processes)
        trace.load_cost = LoadCost(time.perf_counter() - started, peak_rss_bytes())
    return trace


def peak_rss_bytes() -> int:
    """The peak resident memory so far of this process or of its (finished) worker processes,
    whichever is larger."""
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB elsewhere
    return scale * max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                       resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def _reason(file: Path, exc: Exception) -> str:
    """`name: problem` of a rank file's error (its message starts with the full path)."""
    text = exc.format_message() if isinstance(exc, TraceError) else str(exc)
    prefix = f"{quote_path(file)}: "
    text = text[len(prefix):] if text.startswith(prefix) else text
    return f"{quote_path(file.name)}: {text}"


def _load_all(files: list[Path], sizes: list[int], workers: int | None, bar,
              strict: bool = False) -> list:
    parallel = len(files) > 1 and sum(sizes) > PARALLEL_BYTES and (workers or 2) > 1
    if not parallel:
        results = []
        parts = min(workers or os.cpu_count() or 1, 4) if len(files) == 1 else 1
        for i, f in enumerate(files):
            progress = Progress(bar)
            try:
                results.append(_load_file(f, i, parts, progress))
            except TraceError as exc:
                if strict or len(files) == 1:
                    raise
                results.append(exc)
            progress.add(max(0, sizes[i] - progress.bytes),
                         None if progress.events or isinstance(results[-1], Exception) else results[-1])
        return results
    n = min(len(files), workers or os.cpu_count() or 1)
    with worker_pool(n) as pool:
        futures = [pool.submit(load_rank_file, f, i) for i, f in enumerate(files)]
        results = []
        for i, fut in enumerate(futures):
            try:
                results.append(fut.result())
            except BrokenProcessPool:
                raise TraceError(f"{files[i]}: the worker process loading it died (killed, or out of "
                                 f"memory)") from None
            if strict and isinstance(results[-1], Exception):
                raise results[-1]
            if bar is not None:
                bar.update(sizes[i])
        return results


def _assemble(files: list[Path], results: list[FileResult]) -> Trace:
    warnings: list[str] = []
    if len(results) == 1:
        res = results[0]
        if res.rank is not None:
            source, ranks = "distributedInfo", [res.rank]
        elif res.merged_ranks:
            source, ranks = "process names", res.merged_ranks
        else:
            source, ranks = "single file", [0]
    else:
        source, ranks = ranks_of_many(results, warnings)
    skipped = sum(r.skipped for r in results)
    if skipped:
        where = (f" in {results[0].path.name}" if len(results) == 1 else
                 " in " + ", ".join(f"{r.path.name} ({r.skipped:,})" for r in results if r.skipped))
        unfit = sum(r.unfit for r in results)
        why = f" ({unfit:,} with a time that does not fit the trace)" if unfit else ""
        warnings.append(f"skipped {skipped:,} malformed event(s){where}{why}")
    warnings.extend(w for r in results for w in r.warnings
                    if len(results) > 1 or not w.endswith(": no events"))
    events = concat_tables([r.table for r in results])
    frames = Frames.concat([r.frames for r in results])
    memory = concat_memory([r.memory for r in results])
    props = {}
    for r in results:
        for rank in ([r.rank] if r.rank is not None else r.merged_ranks or
                     sorted(set(r.table["rank"].unique().tolist()))):
            props.setdefault(int(rank), r.device_properties)
    sizes = {r.world_size for r in results if r.world_size is not None}
    return Trace(events, files, sorted(ranks), source, props, skipped, warnings, frames, memory,
                 sizes.pop() if len(sizes) == 1 else None, [file_rank(r) for r in results])
