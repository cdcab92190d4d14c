"""The heap guard: keeps a profiler window from reshaping glibc's main heap. Opt-in.

Without it a run that profiled one window keeps more RSS for the rest of the run, because the
window does three things to the main heap, where the training thread's memory lives:

1. Stopping the profiler builds its results on the main heap, and a few allocations made
   meanwhile (libkineto's activity maps' bucket arrays, its Config, trace metadata, thread names,
   log lines) outlive the profiler at the top of that growth, so the heap cannot shrink; glibc
   then hands the training's transient tensors the best-fitting hole wherever it is, and they
   fault the freed space back in, iteration after iteration.
2. The profiler fills and splits the holes the training had before the window, so its big
   tensors no longer fit there and grow the heap instead.
3. glibc raises its mmap threshold (and trim threshold = 2 x it) whenever it frees an mmapped
   block of up to 32 MB; the profiler frees such blocks, so memory the PPO update's minibatches
   used to give back afterwards stays.

It is off unless GOODHART_HEAP_GUARD is on (1/true/yes/on, read with the PROF_* variables:
`ProfSettings.heap_guard`): the hooks run inside loops users write themselves, and the guard
tunes glibc's allocator for the whole process, for good (mallopt freezes glibc's dynamic
mmap/trim thresholds, which glibc cannot turn back on; blocks stay reserved between windows).
What it buys is bounded and what it costs is time: the measurements are in docs/benchmarks.md,
"Heap guard". What every run needs is that the RSS stops growing once the window is over, guard
or not: scripts/soak_train.py checks that (guard off unless --heap-guard).

What always runs, guard or not: `release_memory()` when a window closes (gc + malloc_trim),
which hands the memory the profiler freed back to the OS.

Linux/glibc only; with another allocator (musl, macOS, Windows, a preloaded jemalloc or
tcmalloc) every function here does nothing.
"""
from __future__ import annotations

import ctypes
import gc
import mmap
import os

__all__ = ["HeapGuard", "PROCESS_GUARD", "release_memory"]


def _glibc() -> ctypes.CDLL | None:
    """libc with malloc & co. typed, when this process's malloc is glibc's own; None elsewhere
    (musl, macOS, Windows, or a preloaded jemalloc/tcmalloc), and then this module does nothing."""
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


def release_memory() -> None:
    """Hand the memory a closed profiler freed back to the OS. The profiler frees it, but glibc
    keeps freed heap pages, so without this a long run would stay at the window's peak RSS.
    Once per window, ~0.1 s (mostly the gc). Runs whether the guard is on or not."""
    gc.collect()  # the profiler's Python objects hold its event buffers and form cycles
    if _GLIBC is not None:
        _GLIBC.malloc_trim(0)


class HeapGuard:
    """What the guard does (see the module docstring for why, and why it is opt-in):

    * `window_starts()` (before the profiler is created) freezes glibc's thresholds at the values
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
    holes) malloc calls), and the traced iterations run slower (module docstring)."""

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


PROCESS_GUARD = HeapGuard()  # the heap is the process's: one guard per process, like the heap
