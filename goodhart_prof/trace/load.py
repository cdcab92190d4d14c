"""File or folder -> `Trace`: each file decoded (a big one piece by piece, a plain one over 64 MB
in byte ranges over worker processes, one in memory over 24 MB -- gzip inflated, or read whole --
cut in place over them: ranges.py) into its tables, then the files assembled. Which rank each file
holds (distributedInfo, merged process names, file names, or file order) is file_ranks.py's."""
from __future__ import annotations

import gc
import os
import resource
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import TraceError
from . import times
from .decode import AmbiguousDoc, DecodeError
from .file_bytes import GZIP_MAGIC, FileChanged, read_bytes
from .file_ranks import file_rank, header_rank, rank_evidence, ranks_of_many, trace_files, world_size
from .memory_table import concat_memory
from .attribution import attach_attribution
from .file_result import FileResult
from .model import Frames, LoadCost, Trace
from . import columnar, native_gzip, ranges
from .profiler_counters import has_ranges, read_counters
from .pieces import PIECE_BYTES, BadCut, file_frame, gzip_chunks, merge_headers
from .progress import Progress, progress_bar
from .tables import assign_ranks, concat_tables
from .workers import worker_pool
from ..textsafe import quote_path

PROGRESS_BYTES = 50 * 1024 * 1024  # inputs over ~50 MB get a progress bar
PARALLEL_BYTES = 8 * 1024 * 1024   # below this, worker processes cost more than they save
TRIM_EVENTS = 1_000_000  # a load this big gives its freed heap back once assembled (4 GB trace: 1.55 -> 0.93 GB RSS)


def _streamed(path: Path, parts: int, progress: "Progress | None") -> "tuple[list[ranges.Piece] | None, Any]":
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
            frame = file_frame(fh, before.st_size) if parts > 1 or columnar.AVAILABLE else None
    except OSError:
        return None, None  # `read_bytes` says why
    try:
        if frame is not None and columnar.AVAILABLE:
            try:
                native = ranges.native_file_ranges(path, before, frame, progress)
                if native is not None:
                    return native, None
            except _FATAL:
                raise
            except DecodeError:
                pass  # the msgspec way below, which says what is wrong
            if parts == 1:
                frame = None
        if frame is not None:
            try:
                ranged = ranges.file_ranges(path, before, frame, parts, progress, PIECE_BYTES)
                if ranged is not None:
                    return ranged, None
            except _FATAL:
                raise
            except (BadCut, DecodeError):
                pass  # a range that cannot be cut there: the document in one process
        return ranges.stream_range(path, 0, None, True, progress, expect=before, piece_bytes=PIECE_BYTES), None
    except _FATAL:
        raise
    except (BadCut, DecodeError, OSError):
        return None, None


_FATAL = (FileChanged, AmbiguousDoc)


def _streamed_gzip(path: Path, progress: "Progress | None") -> "tuple[list[ranges.Piece] | None, Any]":
    """A gzip file: inflated in steps; a document over PIECE_BYTES is decoded piece by piece
    (inflated again: cheap beside decoding), a smaller one comes back as `read_bytes` gives it."""
    native = native_gzip.document(path)
    if native is not None:
        return [native], None
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
        return ranges.stream_range(path, 0, None, True, progress, gz=True, piece_bytes=PIECE_BYTES), None
    except _FATAL:
        raise
    except (BadCut, DecodeError, OSError):
        return None, None


def _load_file(path: Path, default_rank: int, parts: int = 1, progress: "Progress | None" = None) -> FileResult:
    try:
        pieces, raw = _streamed(path, parts, progress)
        if pieces is None and raw is None:
            raw = read_bytes(path)
        if pieces is None and parts > 1:  # a big document in memory: in ranges over processes
            try:
                pieces = ranges.buffer_ranges(path, raw, parts, PIECE_BYTES)
            except (BadCut, DecodeError):
                pieces = None  # decoded whole below, which says what is wrong with it
        pieces = pieces or [ranges.piece_of(raw)]
    except DecodeError as exc:
        raise TraceError(f"{quote_path(path)}: {exc}") from None
    except OSError as exc:
        raise TraceError(f"{quote_path(path)}: cannot read ({exc.strerror or exc})") from None
    finally:
        columnar.release()
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
    listed: list[str] = []  # rank files that are no files (dangling links, ...): warned for
    files = trace_files(path, strict, listed)
    try:
        sizes = [f.stat().st_size for f in files]
    except OSError as exc:
        raise TraceError(f"{quote_path(exc.filename)}: cannot read ({exc.strerror})") from None
    total = sum(sizes)
    show = total > PROGRESS_BYTES if progress is None else progress
    bar = progress_bar(len(files), total, show)
    collecting = gc.isenabled()
    gc.disable()  # the tables hold arrays, not object graphs: a collection pass would find nothing
    try:
        outcomes = _load_all(files, sizes, workers, bar, strict)
    finally:
        if collecting:
            gc.enable()
        if bar is not None:
            bar.close()
    trace = finish(path, files, outcomes, strict, listed, started=started)
    if has_ranges(trace):  # CUPTI counters: a second, narrow pass (profiler_counters.py)
        trace.counters = read_counters(trace)
    return attach_attribution(trace, path, load)


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
