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
from pathlib import Path
from typing import Any, Iterator

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from .fileio import atomic_path, write_json
from .trace.merge import merge_rank_traces
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

    def abort(self) -> None:
        """Training failed or was interrupted: stop tracing and write nothing."""
        self._abandon()

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

    def _abandon(self) -> None:
        prof, self._prof = self._prof, None
        if prof is not None:
            with contextlib.suppress(Exception):
                prof.stop()
            del prof
            release_memory()


def release_memory() -> None:
    """Hand the memory a closed profiler freed back to the OS. The profiler frees it, but glibc
    keeps freed heap pages, so without this a long run would stay at the window's peak RSS
    (+8% on the tiny config; scripts/soak_train.py measures it). Once per window, ~0.1 s."""
    gc.collect()  # the profiler's Python objects hold its event buffers and form cycles
    try:
        ctypes.CDLL(None).malloc_trim(0)  # glibc only; elsewhere there is nothing to do
    except (OSError, AttributeError):
        pass


def make_hooks(settings: ProfSettings, rank: int = 0, device_type: str = "cpu"):
    return ProfilerHooks(settings, rank, device_type) if settings.enabled else NoHooks()


# -- trace files ----------------------------------------------------------------------------
def write_profiler_trace(prof: profile, path: Path) -> None:
    # export_chrome_trace gzips when the name ends in .gz, so the temp name keeps that suffix.
    with atomic_path(path, suffix=".gz") as tmp:
        prof.export_chrome_trace(str(tmp))
