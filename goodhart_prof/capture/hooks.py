"""Profiler hooks for a training loop: PROF_* settings -> torch.profiler, phase names, trace files.

A loop asks `make_hooks(settings, rank)` once. With profiling off it gets `NoHooks`, whose
methods return one shared `nullcontext`: no profiler object exists and nothing is recorded.
With profiling on it gets `ProfilerHooks`, which warms torch.profiler up during iteration
`first - 1` (recording nothing of it), starts recording when iteration `first` begins, wraps each
traced iteration N in `ProfilerStep#N` (so the label always equals the training iteration, also
after a resume), and stops the profiler and exports the trace when iteration `last` ends; a child
process compresses it off the loop (trace_files.py) and `close` waits for it. Files are written
under a temporary name and renamed, so an interrupted run never leaves a truncated trace under
the final name. With `settings.metrics` (PROF_METRICS, which `goodhart-prof run -- CMD` sets) rank
0 logs every iteration's wall time and env steps to metrics.jsonl (iteration_log.py). The glibc
heap guard (heap_guard.py) runs around the window only when `settings.heap_guard` asks for it.
"""
from __future__ import annotations

import contextlib
import os
import time
import warnings
from pathlib import Path
from typing import Any, Iterator

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from ..fileio import atomic_path, write_json
from .heap_guard import PROCESS_GUARD, release_memory
from .iteration_log import IterationLog, check_env_steps
from .settings import (DEFAULT_ITERATIONS, MODES, PHASES, QUIET_KINETO, ProfSettings, SettingsError,
                       parse_iterations)
from .trace_files import ATTRIBUTION_DIR, PendingWrite, start_write, trace_name, traced_iterations, write_profiler_trace

__all__ = ["DEFAULT_ITERATIONS", "MODES", "PHASES", "ProfSettings", "SettingsError", "parse_iterations",
           "NoHooks", "ProfilerHooks", "make_hooks", "atomic_path", "write_json", "write_profiler_trace",
           "trace_name", "traced_iterations", "release_memory"]

_NULL = contextlib.nullcontext()


class NoHooks:
    """Profiling off: every hook is the same no-op context, nothing else happens."""

    enabled = False
    trace_path: Path | None = None

    def phase(self, name: str) -> contextlib.AbstractContextManager:
        return _NULL

    def iteration(self, it: int, env_steps: float | None = None) -> contextlib.AbstractContextManager:
        return _NULL

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


class ProfilerHooks:
    """Profiling on: trace iterations settings.first..settings.last of this rank.

    The warm-up (torch.profiler's `schedule(wait, warmup=1, active)`, without its step labels,
    which count from 0 and would not equal the training iteration): the profiler is created and
    prepared (`prepare_trace`: Kineto/CUPTI set up, no RecordFunction callbacks) when iteration
    `first - 1` begins, and recording starts (`start_trace`) when iteration `first` begins. So the
    set-up no longer lands in `ProfilerStep#first` (it made that iteration ~1.4x the next traced
    one on the CPU; CUPTI's start on a GPU costs more), and nothing of the warm-up iteration is in the
    trace: no ProfilerStep label, no op, no phase (phases return the no-op context until
    recording starts; the trace's own span opens at start_trace; tests/capture/test_hooks.py checks this
    on the CPU). Starting the profiler outright one iteration early would record that iteration.
    What the warm-up costs: the set-up, moved into iteration `first - 1`, which records nothing
    (its time against an untraced iteration: docs/benchmarks.md, "Profiler warm-up"). Throughput
    leaves that iteration out all the same (`ProfSettings.profiler_slows`), since a profiler exists
    during it.

    No warm-up is possible when no iteration before `first` runs under these hooks: a window
    starting at iteration 0, or a resume that starts at `first` or inside the window. Then the
    profiler starts cold in the first iteration it sees (the start-up cost lands there, as before)
    and the window is recorded from that iteration on, labels still equal to the iterations.
    Except where the window began before this process and its trace is already on disk (a resume
    inside the window of a run that finished it): that trace is kept, and nothing is recorded
    (a part of the window would replace the whole of it).
    """

    enabled = True

    def __init__(self, settings: ProfSettings, rank: int = 0, device_type: str | None = None):
        self.settings, self.rank, self.device_type = settings, rank, profiled_device(device_type)
        # Kineto's own lines (`USDT ... profiler_start`, stage logs) would print inside the user's
        # loop; quiet, as `goodhart-prof run` starts the trainer, unless KINETO_LOG_LEVEL is set.
        # Kineto reads it when the first profiler starts, which is after this.
        os.environ.setdefault("KINETO_LOG_LEVEL", QUIET_KINETO)
        self.trace_path = Path(settings.output_dir) / trace_name(rank)
        self._prof: profile | None = None  # exists from the warm-up (or cold start) to the close
        self._recording = False            # start_trace called: events are being recorded
        self._kept = False                 # the window began earlier and its trace is kept
        self._guard = PROCESS_GUARD if settings.heap_guard else None
        self._pending: list[PendingWrite] = []  # traces being compressed off the loop
        # lite window finished in this process: iteration last + 1 is recorded with Python stacks
        # into attribution/ (the sites of the window's events, without slowing the window)
        self._attribute: int | None = None
        self._sites_prof: profile | None = None
        # PROF_METRICS (set by `goodhart-prof run -- CMD`): rank 0 logs each iteration's time
        self._log = IterationLog(settings.output_dir) if settings.metrics and rank == 0 else None

    def phase(self, name: str) -> contextlib.AbstractContextManager:
        return record_function(name) if self._recording or self._sites_prof is not None else _NULL

    @contextlib.contextmanager
    def iteration(self, it: int, env_steps: float | None = None) -> Iterator[None]:
        """Iteration `it` of the loop; `env_steps`: the env steps it takes (metrics.jsonl)."""
        env_steps = check_env_steps(env_steps)
        first, last = self.settings.first, self.settings.last
        if it == self.settings.warmup_iteration and self._prof is None:
            self._prof = self._open()  # warm-up: prepared, recording nothing
        elif first <= it <= last and not self._recording and not self._kept:
            if self._prof is None and it > first and self.trace_path.exists():
                self._kept = True  # a resume inside a finished window: its trace stands
            else:
                if self._prof is None:  # no warm-up iteration ran: cold start
                    self._prof = self._open()
                self._prof.start_trace()
                self._recording = True
        attributing = it == self._attribute and self._sites_prof is None
        if attributing:
            self._sites_prof = self._new_profiler(stacks=True)
            self._sites_prof.start()
        step = record_function(f"ProfilerStep#{it}") if self._recording or attributing else _NULL
        started = time.perf_counter()
        try:
            with step:
                yield
        except BaseException:
            self._abandon()
            raise
        if self._log is not None:  # the clock stops before the window's close
            self._log.add(it, time.perf_counter() - started, env_steps)
        if self._recording and it == last:
            self._finish()
            if self.settings.mode == "lite" and self.settings.sites:
                self._attribute = it + 1
        elif attributing:
            self._finish_attribution()

    def close(self) -> None:
        """End of training: a window cut short by total_iterations still gets its trace (a
        profiler still in its warm-up has recorded nothing and writes nothing)."""
        try:
            if self._recording:
                self._finish()
            else:
                self._abandon()
            self._wait_written()
        finally:
            self._release_guard()
            self._close_log()

    def abort(self) -> None:
        """Training failed or was interrupted: stop tracing and write nothing of an unfinished
        window (a finished one's trace, still being compressed, is completed)."""
        try:
            self._abandon()
            self._wait_written()
        finally:
            self._release_guard()
            self._close_log()

    def _wait_written(self) -> None:
        pending, self._pending = self._pending, []
        for write in pending:
            write.wait()

    def _finish_attribution(self) -> None:
        prof, self._sites_prof, self._attribute = self._sites_prof, None, None
        prof.stop()
        self._pending.append(start_write(prof, self.attribution_path))
        del prof
        release_memory()

    @property
    def attribution_path(self) -> Path:
        """Where the iteration after a lite window, recorded with stacks, goes."""
        return self.trace_path.parent / ATTRIBUTION_DIR / self.trace_path.name

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()

    def _open(self) -> profile:
        if self._guard is not None:
            self._guard.window_starts()
        prof = self._new_profiler()
        with warnings.catch_warnings():
            # torch 2.11 on CUDA warns that a second cycle would clear the first's events; the
            # window is one cycle, so there is nothing to keep (seen on an H100, full mode).
            warnings.filterwarnings("ignore", message=".*Profiler clears events")
            prof.prepare_trace()
        return prof

    def _new_profiler(self, stacks: bool = False) -> profile:
        activities = [ProfilerActivity.CPU]
        if self.device_type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        if stacks:  # the attribution iteration: the window's ops again, with the Python frames
            return profile(activities=activities, with_stack=True)
        full = self.settings.mode == "full"
        # No with_flops: the profiler's FLOP estimate costs about 1 us per recorded op (half of
        # full mode's per-op cost, measured on the CPU) for a figure that the shapes full mode
        # records give anyway (FLOPs of GEMM/conv ops are computed from `Input Dims`).
        kwargs: dict[str, Any] = dict(activities=activities, record_shapes=full,
                                      with_stack=full, profile_memory=full)
        experimental = experimental_options(full, self.device_type, self.settings.counters)
        if experimental:
            try:  # where this torch has them
                kwargs["experimental_config"] = torch.profiler._ExperimentalConfig(**experimental)
            except (AttributeError, TypeError):
                if self.settings.counters:
                    raise  # asked for by name: a torch that cannot count them says so
        return profile(**kwargs)

    def _finish(self) -> None:
        prof, self._prof, self._recording = self._prof, None, False
        prof.stop_trace()
        self._pending.append(start_write(prof, self.trace_path))  # compressed off the loop
        del prof
        release_memory()
        if self._guard is not None:
            self._guard.window_ends()

    def _abandon(self) -> None:
        sites, self._sites_prof, self._attribute = self._sites_prof, None, None
        if sites is not None:  # an unfinished attribution iteration: nothing written
            with contextlib.suppress(Exception):
                sites.stop()
            del sites
        prof, self._prof = self._prof, None
        recording, self._recording = self._recording, False
        if prof is not None:
            with contextlib.suppress(Exception):
                if not recording:  # a prepared session is ended by a start and a stop;
                    prof.start_trace()  # stopping it unstarted makes Kineto warn twice
                prof.stop_trace()
            del prof
            release_memory()
        self._release_guard()

    def _release_guard(self) -> None:
        if self._guard is not None:
            self._guard.release()


def make_hooks(settings: ProfSettings, rank: int = 0, device_type: str | None = None):
    """The hooks of one rank's loop. `device_type`: None traces the GPU when torch sees one
    (`cuda`, also ROCm's), else the CPU only; `cuda` without a GPU is the CPU only (the profiler
    would warn and record nothing of the device)."""
    return ProfilerHooks(settings, rank, device_type) if settings.enabled else NoHooks()


def profiled_device(device_type: str | None) -> str:
    """`cuda` where torch sees a GPU and the caller asked for it or left it to us, else `cpu`."""
    if device_type in (None, "cuda"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device_type


def experimental_options(full: bool, device_type: str, counters: tuple[str, ...]) -> dict[str, Any]:
    """torch.profiler._ExperimentalConfig's arguments for a window: CUDA sync events
    (cudaStreamSynchronize & co.) in full mode, and PROF_COUNTERS' CUPTI counters measured per
    kernel (HTA's CUPTI counter analysis reads the same `cuda_profiler_range` events); none on
    the CPU (the counters are a CUDA profiler's: asked for there, they are ignored with a warning)."""
    if device_type != "cuda":
        if counters:
            warnings.warn("PROF_COUNTERS is ignored: the loop does not run on a CUDA device", stacklevel=3)
        return {}
    out: dict[str, Any] = {"enable_cuda_sync_events": True} if full else {}
    if counters:
        out.update(profiler_metrics=list(counters), profiler_measure_per_kernel=True)
    return out
