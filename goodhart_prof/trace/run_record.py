"""A run folder's own record: `run.json` and `metrics.jsonl` beside the traces.

The trainer (trainer/launch.py) writes both into the run's output folder; for a user's command
(`goodhart-prof run -- CMD`) the hooks write metrics.jsonl (capture/iteration_log.py) and `run`
writes run.json (capture/command_runs.py). A compared path is part
of a run when it is that folder (it holds run.json) or a file inside it (a rank trace, the merged
trace). What is read:

- from run.json: `profiling.iterations` (the traced window FIRST..LAST, when profiling was
  enabled), `world_size`, `env_steps_per_s` (the trainer's own whole-run figure), `profiling.mode`
  and `device` (diff warns when two runs differ in them);
- from metrics.jsonl: one row per finished iteration, `iteration`, `env_steps` (rank 0's),
  `iteration_s`, `env_steps_per_s` (rank 0's env steps / its iteration time).

**Warm-up** (docs/DESIGN.md "Noise"): the run's first iteration (the first row of metrics.jsonl;
0 without a run record) pays for compilation, autotuning and allocator growth, and is never a
time or throughput sample. **Throughput iterations** (`throughput`): the rows that are not
warm-up and during which no profiler existed: not the profiler's warm-up iteration FIRST - 1,
not the traced FIRST..LAST, not LAST + 1 (it writes the trace) -- the iterations the trainer's
own `env_steps_per_s` is measured over, less the first -- and of those, the ones before the
window when there are 3 or more (the CPU preset traces 50-55 of 56: 48 of them), else the ones
after it. The two are not mixed: after the window the process runs in another state (the trace
written and its memory released), and runs at another speed (docs/benchmarks.md, "Iterations
after a traced window"). Their per-iteration env-steps/s, times the world size (ranks step in lockstep,
each with its own envs), are the samples of the env-steps/s figure.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..capture.settings import WARMUP_ITERATIONS, profiler_window
from ..textsafe import quote_path
from .run_json import read_run_json

RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"
MIN_SAMPLES = 3  # analysis/compare/spread.py MIN_ITERATIONS: fewer values give no interval


@dataclass
class RunRecord:
    """What a run folder says about its run (module docstring)."""

    folder: Path
    world_size: int
    window: tuple[int, int] | None  # traced iterations FIRST..LAST (None: profiling off)
    env_steps_per_s: float | None   # run.json's whole-run figure
    metrics: pd.DataFrame = field(repr=False)  # iteration, env_steps, iteration_s, env_steps_per_s
    warnings: list[str] = field(default_factory=list)  # metrics.jsonl lines skipped (`_metrics`)
    mode: str | None = None    # run.json profiling.mode (`lite`, `full`), when it says
    device: str | None = None  # run.json device (`NVIDIA H200`, `AMD EPYC`), when it says

    @property
    def first_iteration(self) -> int | None:
        """The run's first iteration (metrics.jsonl's first row); None without rows."""
        return int(self.metrics["iteration"].iloc[0]) if len(self.metrics) else None

    @property
    def warmup(self) -> list[int]:
        first = self.first_iteration
        return [] if first is None else list(range(first, first + WARMUP_ITERATIONS))

    def profiled(self, iteration: np.ndarray) -> np.ndarray:
        """A profiler slowed the iteration (capture/settings.profiler_window)."""
        if self.window is None:
            return np.zeros(len(iteration), dtype=bool)
        return profiler_window(iteration, *self.window)

    def traced_seconds(self) -> np.ndarray:
        """iteration_s of the traced iterations FIRST..LAST (warm-up left out): the run's own
        clock of the iterations the trace holds, profiler cost included (empty: no window)."""
        if self.window is None:
            return np.zeros(0)
        it = self.metrics["iteration"].to_numpy(np.int64)
        keep = (it >= self.window[0]) & (it <= self.window[1]) & ~np.isin(it, self.warmup)
        return pd.to_numeric(self.metrics["iteration_s"][keep], errors="coerce").to_numpy(float)

    def untraced(self, column: str = "iteration_s") -> pd.DataFrame:
        """The metrics rows that are time samples of the loop without a profiler and have a
        value in `column`: the untimed rows are left out, then the rows before the window are
        taken when there are 3 or more, else those after it (module docstring)."""
        m = self.metrics
        it = m["iteration"].to_numpy(np.int64)
        keep = ~self.profiled(it) & ~np.isin(it, self.warmup) & m[column].notna().to_numpy()
        if self.window is not None:
            before = keep & (it < self.window[0])
            keep = before if before.sum() >= MIN_SAMPLES else keep & (it > self.window[1])
        return m[keep].reset_index(drop=True)

    def throughput(self) -> pd.DataFrame:
        """The untraced rows whose env-steps/s is a throughput sample (`untraced`), with `rate`
        and `env_steps_all` (all ranks). Empty for a loop that reports no env steps."""
        out = self.untraced("env_steps_per_s").copy()
        out["rate"] = out["env_steps_per_s"].astype(float) * self.world_size
        out["env_steps_all"] = pd.to_numeric(out["env_steps"], errors="coerce") * self.world_size
        return out


def run_folder(path: str | os.PathLike) -> Path | None:
    """The run folder of path: path itself when it holds run.json, else the folder of a file
    whose folder holds one; None when path is not part of a run."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    return folder if (folder / RUN_FILE).is_file() else None


def read_run(path: str | os.PathLike) -> RunRecord | None:
    """The RunRecord of the run path belongs to (None: not part of a run). A run.json that is
    not JSON, too big, too deep or has a field of the wrong type (trace/run_json.py) is a
    one-line error naming it; a metrics.jsonl line that cannot be used is skipped with a warning
    (`RunRecord.warnings`, for the caller to show)."""
    folder = run_folder(path)
    if folder is None:
        return None
    record = read_run_json(folder / RUN_FILE)  # size, nesting and the fields' types checked
    profiling = record.get("profiling") or {}
    window = profiling.get("iterations") if profiling.get("enabled") else None
    window = (int(window[0]), int(window[1])) if _pair(window) else None
    world = record.get("world_size")
    rate = record.get("env_steps_per_s")
    warnings: list[str] = []
    return RunRecord(folder=folder, world_size=int(world) if isinstance(world, int) and world > 0 else 1,
                     window=window,
                     env_steps_per_s=None if math.isnan(_float(rate)) else _float(rate),
                     metrics=_metrics(folder / METRICS_FILE, warnings), warnings=warnings,
                     mode=_text(profiling.get("mode")), device=_text(record.get("device")))


def _text(value) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _pair(value) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value)


MAX_ITERATION = 2**63 - 1  # iterations are int64 in the table


def _metrics(path: Path, warnings: list[str]) -> pd.DataFrame:
    """metrics.jsonl's rows. A torn last line (the run still writing it, or stopped while it did),
    a line that is not a row (not UTF-8, not JSON, no integer `iteration`) and an iteration out of
    the int64 range are skipped, each with a warning naming the file and the line; a value that is
    not a finite number (or is beyond a float) is NaN."""
    rows = []
    data = _read_metrics(path, warnings)
    lines = data.split(b"\n")
    torn = lines.pop() if lines else b""  # after the last newline: a line still being written
    not_rows: list[int] = []
    for number, line in enumerate(lines + ([torn] if torn.strip() else []), start=1):
        row = _json_line(line)
        if row is None and number > len(lines):
            warnings.append(f"{quote_path(path)}: skipped line {number}, its last: torn (the run was "
                            "still writing it, or was stopped)")
            continue
        if row is None:
            if line.strip():
                not_rows.append(number)
            continue
        it = row.get("iteration")
        if not isinstance(it, int) or isinstance(it, bool):
            not_rows.append(number)
        elif not 0 <= it <= MAX_ITERATION:
            warnings.append(f"{quote_path(path)}: skipped line {number}: iteration {_clip(it)} is out of "
                            "range (0 to 2**63 - 1)")
        else:
            rows.append((it, _float(row.get("env_steps")), _float(row.get("iteration_s")),
                         _float(row.get("env_steps_per_s"))))
    if not_rows:
        shown = ", ".join(map(str, not_rows[:5])) + (", ..." if len(not_rows) > 5 else "")
        warnings.append(f"{quote_path(path)}: skipped {len(not_rows)} line(s) that are not metrics rows "
                        f"(line{'s' if len(not_rows) > 1 else ''} {shown})")
    frame = pd.DataFrame(rows, columns=["iteration", "env_steps", "iteration_s", "env_steps_per_s"])
    frame = frame.drop_duplicates("iteration", keep="last").sort_values("iteration", kind="stable")
    return frame.astype({"iteration": np.int64, "env_steps": float, "iteration_s": float,
                         "env_steps_per_s": float}).reset_index(drop=True)


def _read_metrics(path: Path, warnings: list[str]) -> bytes:
    """The file's bytes; b"" when there is none, or (with a warning) when it cannot be read."""
    try:
        if not path.is_file():
            return b""
        return path.read_bytes()
    except OSError as exc:
        warnings.append(f"{quote_path(path)}: not read ({exc.strerror or exc}); the run's "
                        "per-iteration figures are left out")
        return b""


def _json_line(line: bytes) -> dict | None:
    """One line's object; None for a line that is not UTF-8, not JSON, or not an object."""
    try:
        row = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    return row if isinstance(row, dict) else None


def _float(value) -> float:
    """A finite number as a float; NaN for anything else (text, a bool, an int beyond a float)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return math.nan
    try:
        value = float(value)
    except OverflowError:
        return math.nan
    return value if math.isfinite(value) else math.nan


def _clip(value) -> str:
    text = str(value)
    return text if len(text) <= 24 else text[:21] + "..."
