"""Profiler hooks for a training loop: PROF_* settings -> torch.profiler, phase names, trace files.

A loop asks `make_hooks(settings, rank)` once. With profiling off it gets `NoHooks`, whose
methods return one shared `nullcontext`: no profiler object exists and nothing is recorded.
With profiling on it gets `ProfilerHooks`, which warms torch.profiler up during iteration
`first - 1` (recording nothing of it), starts recording when iteration `first` begins, wraps each
traced iteration N in `ProfilerStep#N` (so the label always equals the training iteration, also
after a resume), and stops and writes the trace when iteration `last` ends. Files are written
under a temporary name and renamed, so an interrupted run never leaves a truncated trace under
the final name. The glibc heap guard (heap_guard.py) runs around the window only when
`settings.heap_guard` asks for it.
"""
from __future__ import annotations

import contextlib
import errno
import gzip
import os
import re
import shutil
import warnings
from pathlib import Path
from typing import Any, Iterator

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from ..fileio import atomic_path, write_json, writing
from .heap_guard import PROCESS_GUARD, release_memory
from .settings import (DEFAULT_ITERATIONS, MODES, PHASES, QUIET_KINETO, ProfSettings, SettingsError,
                       parse_iterations)

__all__ = ["DEFAULT_ITERATIONS", "MODES", "PHASES", "ProfSettings", "SettingsError", "parse_iterations",
           "NoHooks", "ProfilerHooks", "make_hooks", "atomic_path", "write_json", "write_profiler_trace",
           "trace_name", "release_memory"]

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

    def phase(self, name: str) -> contextlib.AbstractContextManager:
        return record_function(name) if self._recording else _NULL

    @contextlib.contextmanager
    def iteration(self, it: int) -> Iterator[None]:
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
        step = record_function(f"ProfilerStep#{it}") if self._recording else _NULL
        try:
            with step:
                yield
        except BaseException:
            self._abandon()
            raise
        if self._recording and it == last:
            self._finish()

    def close(self) -> None:
        """End of training: a window cut short by total_iterations still gets its trace (a
        profiler still in its warm-up has recorded nothing and writes nothing)."""
        if self._recording:
            self._finish()
        else:
            self._abandon()
        self._release_guard()

    def abort(self) -> None:
        """Training failed or was interrupted: stop tracing and write nothing."""
        self._abandon()
        self._release_guard()

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

    def _new_profiler(self) -> profile:
        activities = [ProfilerActivity.CPU]
        if self.device_type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        full = self.settings.mode == "full"
        # No with_flops: the profiler's FLOP estimate costs about 1 us per recorded op (half of
        # full mode's per-op cost, measured on the CPU) for a figure that the shapes full mode
        # records give anyway (FLOPs of GEMM/conv ops are computed from `Input Dims`).
        kwargs: dict[str, Any] = dict(activities=activities, record_shapes=full,
                                      with_stack=full, profile_memory=full)
        if full and self.device_type == "cuda":
            try:  # CUDA sync events (cudaStreamSynchronize & co.) where this torch has them
                kwargs["experimental_config"] = torch.profiler._ExperimentalConfig(
                    enable_cuda_sync_events=True)
            except (AttributeError, TypeError):
                pass
        return profile(**kwargs)

    def _finish(self) -> None:
        prof, self._prof, self._recording = self._prof, None, False
        prof.stop_trace()
        write_profiler_trace(prof, self.trace_path)
        del prof
        release_memory()
        if self._guard is not None:
            self._guard.window_ends()

    def _abandon(self) -> None:
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


# -- trace files ----------------------------------------------------------------------------
def write_profiler_trace(prof: profile, path: Path) -> None:
    """The trace as gzipped JSON at `path`, or WriteError (`PATH: cannot write: ...`, exit 2).

    Both temporaries are beside `path`, never in TMPDIR (torch's own .gz export writes its JSON to
    a TMPDIR file first). Kineto writes the JSON from C++ and reports no failed write, so what it
    wrote is checked (a JSON object, whole: a full disk or `ulimit -f` cuts it short, `short_write`
    says which; Kineto's own
    temporary, `<json>.tmp`, is removed when it fails to rename it); the gzip is
    written here, where a failed write raises, and its trailer checked against the JSON's size."""
    with writing(path, suffix=".gz") as gz_tmp:
        json_tmp = gz_tmp.with_name(gz_tmp.name[:-len(".gz")] + ".json")
        try:
            prof.export_chrome_trace(str(json_tmp))  # not .gz: written as it is, beside
            size = check_json_written(json_tmp)
            with open(json_tmp, "rb") as fin, gzip.open(gz_tmp, "wb") as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
            check_gzip_written(gz_tmp, size)
        finally:
            json_tmp.unlink(missing_ok=True)
            Path(f"{json_tmp}.tmp").unlink(missing_ok=True)  # Kineto's own, left when it failed


_STEP = re.compile(rb'"name"\s*:\s*"ProfilerStep#(\d{1,19})"')


def traced_iterations(path: Path) -> list[int]:
    """The iterations a trace file holds (its `ProfilerStep#N` labels), read in bounded steps
    without a JSON parser (the trainer needs none): what run.json says of a trace it kept."""
    found: set[int] = set()
    opener = gzip.open if str(path).endswith(".gz") else open
    tail = b""
    with opener(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            block = tail + chunk
            found.update(int(m.group(1)) for m in _STEP.finditer(block))
            tail = block[-64:]  # a label cut between two reads is found in the next block
    return sorted(found)


def check_json_written(path: Path) -> int:
    """The size of the JSON document at `path`; OSError when it is missing (Kineto did not get
    to rename its `.tmp`), empty, or does not end its object (a write that stopped short)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        partial = Path(f"{path}.tmp")
        raise short_write(path, partial.stat().st_size if partial.exists() else 0) from None
    with open(path, "rb") as fh:
        head = fh.read(64).lstrip()
        fh.seek(max(0, size - 64))
        tail = fh.read().rstrip()
    if not head.startswith(b"{") or not tail.endswith(b"}"):
        raise short_write(path, size)
    return size


def short_write(path: Path, written: int) -> OSError:
    """Why a write stopped at `written` bytes, where that can be established: the file size limit
    (`ulimit -f`) reached, or a full disk (under 64 KiB free while the partial file is still on it);
    else only that it stopped short. The system's own words, as every other write failure says."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if soft != resource.RLIM_INFINITY and written >= soft:
        return OSError(errno.EFBIG, os.strerror(errno.EFBIG))
    try:
        st = os.statvfs(path.parent)
        free = (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
    except OSError:
        free = None
    if free is not None and free < 64 * 1024:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return OSError(errno.EIO, f"the profiler's JSON stops short ({written:,} bytes written)")


def check_gzip_written(path: Path, size: int) -> None:
    """OSError unless the gzip at `path` ends with the trailer of `size` bytes of input."""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() < 18:
            raise OSError(errno.EIO, "the gzip stops short")
        fh.seek(-4, os.SEEK_END)
        isize = int.from_bytes(fh.read(4), "little")
    if isize != size % 2**32:
        raise OSError(errno.EIO, f"the gzip holds {isize:,} bytes of the {size:,} written")
