"""Profiler hooks for a training loop: PROF_* settings -> torch.profiler, phase names, trace files.

A loop asks `make_hooks(settings, rank)` once. With profiling off it gets `NoHooks`, whose
methods return one shared `nullcontext`: no profiler object exists and nothing is recorded.
With profiling on it gets `ProfilerHooks`, which starts torch.profiler when iteration `first`
begins, wraps each traced iteration N in `ProfilerStep#N` (so the label always equals the
training iteration, also after a resume), and stops and writes the trace when iteration `last`
ends. Files are written under a temporary name and renamed, so an interrupted run never leaves
a truncated trace under the final name.
"""
from __future__ import annotations

import contextlib
import ctypes
import gc
import mmap
import os
from pathlib import Path
from typing import Any, Iterator

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from .fileio import atomic_path, write_json
from .merge import merge_rank_traces
from .settings import (DEFAULT_ITERATIONS, MODES, PHASES, ProfSettings, SettingsError,
                       parse_iterations)

__all__ = ["DEFAULT_ITERATIONS", "MODES", "PHASES", "ProfSettings", "SettingsError", "parse_iterations",
           "NoHooks", "ProfilerHooks", "make_hooks", "atomic_path", "write_json", "write_profiler_trace",
           "merge_rank_traces", "trace_name"]

_NULL = contextlib.nullcontext()

def trace_name(rank: int) -> str:
    return f"rank-{rank}.pt.trace.json.gz"


class NoHooks:
    """Profiling off: every hook is the same no-op context, nothing else happens."""

    enabled = False
    trace_path: Path | None = None

    def phase(self, name: str) -> contextlib.AbstractContextManager:
        return _NULL

    def iteration(self, it: int) -> contextlib.AbstractContextManager:
        return _NULL

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


class ProfilerHooks:
    """Profiling on: trace iterations settings.first..settings.last of this rank."""

    enabled = True

    def __init__(self, settings: ProfSettings, rank: int = 0, device_type: str = "cpu"):
        self.settings, self.rank, self.device_type = settings, rank, device_type
        self.trace_path = Path(settings.output_dir) / trace_name(rank)
        self._prof: profile | None = None

    def phase(self, name: str) -> contextlib.AbstractContextManager:
        return record_function(name) if self._prof is not None else _NULL

    @contextlib.contextmanager
    def iteration(self, it: int) -> Iterator[None]:
        if not self.settings.first <= it <= self.settings.last:
            yield
            return
        if self._prof is None:
            _HEAP.window_starts()
            self._prof = self._new_profiler()
            self._prof.start()
        try:
            with record_function(f"ProfilerStep#{it}"):
                yield
        except BaseException:
            self._abandon()
            raise
        if it == self.settings.last:
            self._finish()

    def close(self) -> None:
        """End of training: a window cut short by total_iterations still gets its trace."""
        if self._prof is not None:
            self._finish()
        _HEAP.release()

    def abort(self) -> None:
        """Training failed or was interrupted: stop tracing and write nothing."""
        self._abandon()
        _HEAP.release()

    def _new_profiler(self) -> profile:
        activities = [ProfilerActivity.CPU]
        if self.device_type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        full = self.settings.mode == "full"
        kwargs: dict[str, Any] = dict(activities=activities, record_shapes=full,
                                      with_stack=full, profile_memory=full, with_flops=full)
        if full and self.device_type == "cuda":
            try:  # CUDA sync events (cudaStreamSynchronize & co.) where this torch has them
                kwargs["experimental_config"] = torch.profiler._ExperimentalConfig(
                    enable_cuda_sync_events=True)
            except (AttributeError, TypeError):
                pass
        return profile(**kwargs)

    def _finish(self) -> None:
        prof, self._prof = self._prof, None
        prof.stop()
        write_profiler_trace(prof, self.trace_path)
        del prof
        release_memory()
        _HEAP.window_ends()

    def _abandon(self) -> None:
        prof, self._prof = self._prof, None
        if prof is not None:
            with contextlib.suppress(Exception):
                prof.stop()
            del prof
            release_memory()
        _HEAP.release()


def release_memory() -> None:
    """Hand the memory a closed profiler freed back to the OS. The profiler frees it, but glibc
    keeps freed heap pages, so without this a long run would stay at the window's peak RSS.
    Once per window, ~0.1 s (mostly the gc)."""
    gc.collect()  # the profiler's Python objects hold its event buffers and form cycles
    if _GLIBC is not None:
        _GLIBC.malloc_trim(0)


# -- glibc's main heap: the profiler must not reshape the training's ----------------------------
def _glibc() -> ctypes.CDLL | None:
    """libc with malloc & co. typed, when this process's malloc is glibc's own; None elsewhere
    (musl, macOS, Windows, or a preloaded jemalloc/tcmalloc), and then _HEAP does nothing."""
    try:
        proc, libc = ctypes.CDLL(None), ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version, libc.malloc_trim, libc.mallopt, libc.sbrk  # glibc only
        if ctypes.cast(proc.malloc, ctypes.c_void_p).value != \
                ctypes.cast(libc.malloc, ctypes.c_void_p).value:
            return None
    except (OSError, AttributeError, TypeError):
        return None
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.restype, libc.free.argtypes = None, [ctypes.c_void_p]
    libc.sbrk.restype, libc.sbrk.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t]
    libc.madvise.restype = ctypes.c_int
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.malloc_trim.restype, libc.malloc_trim.argtypes = ctypes.c_int, [ctypes.c_size_t]
    libc.mallopt.restype, libc.mallopt.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.c_int]
    return libc


_GLIBC = _glibc()
_M_MMAP_MAX = -4     # mallopt parameter (malloc.h)
_MADV_DONTNEED = 4   # the same on every Linux architecture


def _heap_start() -> int | None:
    """Start of the main arena's heap: the [heap] mapping, which ends at sbrk(0)."""
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                if line.rstrip().endswith("[heap]"):
                    return int(line.split("-", 1)[0], 16)
    except (OSError, ValueError):
        pass
    return None


def _mmap_max() -> int:
    """glibc's M_MMAP_MAX as this process set it: DEFAULT_MMAP_MAX unless the environment says."""
    value = 65536
    for item in os.environ.get("GLIBC_TUNABLES", "").split(":"):
        name, _, text = item.partition("=")
        if name.strip() == "glibc.malloc.mmap_max":
            value = _int_or(text, value)
    return _int_or(os.environ.get("MALLOC_MMAP_MAX_", ""), value)


def _int_or(text: str, default: int) -> int:
    try:
        return int(text, 0)
    except ValueError:
        return default


class _HeapHoles:
    """Keeps a profiler window from reshaping glibc's main heap, where the training thread's
    memory lives (Linux/glibc only; elsewhere every method does nothing).

    Without it a run that profiled one window keeps 8..20% more RSS for the rest of the run
    (scripts/soak_train.py, CPU preset: 357 -> 386 MB). Three things the window does to the heap:

    1. Stopping the profiler builds its results on the main heap: +143 MB for the 6-iteration
       lite window (the recording itself: +29 MB). A few allocations made meanwhile outlive the
       profiler and sit at the top of that growth: libkineto keeps its activity maps' bucket
       arrays (2 x 1.38 MB; unordered_map::clear() keeps them), its Config, the trace metadata,
       thread names, log lines. So the heap cannot shrink: after gc + malloc_trim it stays at
       270 MB with 150 MB free inside (live memory only +2.7 MB). malloc_trim drops those holes'
       pages, but glibc hands every request the best-fitting hole wherever it is, so the
       training's transient tensors land in a different place of that space iteration after
       iteration and fault ~40-55 MB of it back in.
    2. The profiler also fills and splits the holes the training had before the window, so its
       big tensors no longer fit there and grow the heap instead.
    3. glibc raises its mmap threshold (and trim threshold = 2 x it) whenever it frees an
       mmapped block of up to 32 MB. The profiler frees such blocks: 6.3 -> 27.6 MiB (trim
       threshold 12.7 -> 55 MiB). Before the window each of the PPO update's 8 minibatches grew
       the heap top by ~12 MB and glibc gave it back; after it that memory stays (+~15 MB).

    What it does:
    * `window_starts()` (before the profiler starts) freezes glibc's thresholds at the values
      the training has (mallopt(M_MMAP_MAX, <its current value>) changes nothing but turns the
      dynamic adjustment off; glibc has no way to turn it back on, so they stay frozen for the
      rest of the process, at the values the training itself led to). Then it reserves the
      training's holes: mallocs every free block of >= MIN_BLOCK bytes, so that the profiler
      (and the traced iterations) take fresh memory above them.
    * `window_ends()` (profiler gone, heap trimmed) reserves what is free now, i.e. the holes the
      profiler left, and gives the training its own holes back as they were. The training then
      allocates as before the window and grows the heap above the profiler's region.
    * `release()` (end of training) frees every reserved block; the next window first frees
      the profiler's ones, so it reuses them instead of growing the heap again.
    Reserved blocks are in use for glibc but their pages are dropped (MADV_DONTNEED), so they
    cost address space, not memory. Cost: a few ms at a window's start and end (O(number of
    holes) malloc calls); the training's iterations are unchanged (time, page faults)."""

    MIN_BLOCK = 1 << 16
    MAX_STEPS = 1 << 20

    def __init__(self) -> None:
        self._frozen = False
        self._training: list[int] = []  # held while a window is open
        self._profiler: list[int] = []  # held from a window's end to the next window

    def window_starts(self) -> None:
        if _GLIBC is None:
            return
        if not self._frozen:  # first: no block freed from here on (_grab's own too) moves them
            self._frozen = bool(_GLIBC.mallopt(_M_MMAP_MAX, _mmap_max()))
        if not self._training:
            self._training = self._grab()
        self._free(self._profiler)
        self._profiler = []

    def window_ends(self) -> None:
        if _GLIBC is None:
            return
        if not self._profiler:
            self._profiler = self._grab()
        self._free(self._training)
        self._training = []

    def release(self) -> None:
        self._free(self._training)
        self._free(self._profiler)
        self._training, self._profiler = [], []

    def _grab(self) -> list[int]:
        """malloc every free block of the brk heap of >= MIN_BLOCK bytes; drop their pages.

        Sizes halve from the heap's size down to MIN_BLOCK. Best fit hands each request the
        smallest free block that holds it (or a piece of the top chunk); a request nothing
        holds grows the heap or is mmapped, is freed at once and ends that size."""
        libc, start = _GLIBC, _heap_start()
        if libc is None or start is None:
            return []
        malloc, free, sbrk, madvise = libc.malloc, libc.free, libc.sbrk, libc.madvise
        page = mmap.PAGESIZE
        held: list[int] = []
        size = 1 << max(0, (sbrk(0) - start).bit_length() - 1)
        for _ in range(self.MAX_STEPS):
            if size < self.MIN_BLOCK:
                break
            end = sbrk(0)
            p = malloc(size)
            if p and start <= p and p + size <= end and sbrk(0) == end:
                held.append(p)
                lo, hi = -(-p // page) * page, (p + size) // page * page
                madvise(lo, hi - lo, _MADV_DONTNEED)  # inside our block: its data is ours
                continue
            if p:
                free(p)
                if sbrk(0) != end:
                    libc.malloc_trim(0)  # it grew the heap: shrink it back now
            size >>= 1
        return held

    @staticmethod
    def _free(blocks: list[int]) -> None:
        if blocks and _GLIBC is not None:
            for p in blocks:
                _GLIBC.free(p)


_HEAP = _HeapHoles()


def make_hooks(settings: ProfSettings, rank: int = 0, device_type: str = "cpu"):
    return ProfilerHooks(settings, rank, device_type) if settings.enabled else NoHooks()


# -- trace files ----------------------------------------------------------------------------
def write_profiler_trace(prof: profile, path: Path) -> None:
    # export_chrome_trace gzips when the name ends in .gz, so the temp name keeps that suffix.
    with atomic_path(path, suffix=".gz") as tmp:
        prof.export_chrome_trace(str(tmp))
