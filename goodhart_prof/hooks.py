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
import gzip
import json
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from .fileio import atomic_path, write_json
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

    def _abandon(self) -> None:
        prof, self._prof = self._prof, None
        if prof is not None:
            with contextlib.suppress(Exception):
                prof.stop()


def make_hooks(settings: ProfSettings, rank: int = 0, device_type: str = "cpu"):
    return ProfilerHooks(settings, rank, device_type) if settings.enabled else NoHooks()


# -- trace files ----------------------------------------------------------------------------
def write_profiler_trace(prof: profile, path: Path) -> None:
    # export_chrome_trace gzips when the name ends in .gz, so the temp name keeps that suffix.
    with atomic_path(path, suffix=".gz") as tmp:
        prof.export_chrome_trace(str(tmp))


def merge_rank_traces(rank_files: Mapping[int, Path], out: Path) -> dict[str, Any]:
    """Write all ranks into one Chrome trace, each rank its own process named `rank <r>`.

    Every event of rank r gets `pid = r`. CPU threads keep their tids; a GPU stream s of device
    d (Kineto gives it pid = d, tid = s) becomes tid `GPU_TID_BASE + d * 1000 + s` and keeps
    `args.device`, so devices stay distinguishable. Timestamps are shifted onto the earliest
    rank's `baseTimeNanoseconds`. Returns a summary (ranks, event counts).
    """
    ranks = sorted(rank_files)
    docs = {r: _read_trace(rank_files[r]) for r in ranks}
    bases = {r: int(docs[r].get("baseTimeNanoseconds", 0) or 0) for r in ranks}
    base = min(bases.values()) if ranks else 0
    events: list[dict[str, Any]] = []
    counts = {}
    for r in ranks:
        shift_us = (bases[r] - base) / 1000.0
        rank_events = _remap_rank(docs[r]["traceEvents"], r, shift_us)
        counts[r] = len(rank_events)
        events.extend(rank_events)
    merged = {
        "schemaVersion": 1,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base,
        "deviceProperties": docs[ranks[0]].get("deviceProperties", []) if ranks else [],
        "goodhartProf": {"merged_ranks": ranks,
                         "sources": {str(r): Path(rank_files[r]).name for r in ranks},
                         "distributedInfo": {str(r): docs[r].get("distributedInfo") for r in ranks}},
        "traceEvents": events,
    }
    with atomic_path(out) as tmp:
        with open(tmp, "w") as fh:
            json.dump(merged, fh, separators=(",", ":"))
    return {"ranks": ranks, "events": counts}


GPU_TID_BASE = 1_000_000_000
_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Kernel", "Memcpy",
             "Memset"}


def _read_trace(path: Path) -> dict[str, Any]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def _remap_rank(events: list[dict[str, Any]], rank: int, shift_us: float) -> list[dict[str, Any]]:
    gpu_pids = {e.get("pid") for e in events if e.get("cat") in _GPU_CATS}
    out: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}},
        {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}},
    ]
    for ev in events:
        name, pid, tid = ev.get("name"), ev.get("pid"), ev.get("tid")
        if ev.get("ph") == "M" and name in ("process_name", "process_labels", "process_sort_index"):
            continue
        ev = dict(ev)
        if pid in gpu_pids:
            device = int(pid) if str(pid).isdigit() else 0
            stream = int(tid) if str(tid).lstrip("-").isdigit() else 0
            ev["tid"] = GPU_TID_BASE + device * 1000 + stream
            if ev.get("ph") == "M" and name == "thread_name":
                ev["args"] = {"name": f"GPU {device} stream {stream}"}
            elif ev.get("ph") != "M":
                ev["args"] = {**ev.get("args", {}), "device": device}
        ev["pid"] = rank
        if "ts" in ev and shift_us:
            ev["ts"] = ev["ts"] + shift_us
        out.append(ev)
    return out
