"""`goodhart-prof run [OPTIONS] -- CMD ARGS...`: a loop we did not write, run as a first-class run.

The command runs in its own run folder, as the trainer does (runs.py: the folder, `latest`, the
signals passed on), with the PROF_* variables set for the hooks it calls (docs/trainer.md):
profiling on, the window and mode given, `PROF_OUTPUT_DIR` the run's folder, and `PROF_METRICS=1`,
so the hooks log every iteration's wall time and env steps to metrics.jsonl (iteration_log.py).
When it ends, this process writes the run's run.json from what is in the folder: the command and
its exit code, the window, the iterations the traces hold, env-steps/s over the untraced
iterations, an interruption (a signal ended it) or a failure (a non-zero exit code), and the rank
traces, merged into merged_trace.json when there are several (merging.py). Torch-free.
"""
from __future__ import annotations

import math
import platform
import socket
import time
from pathlib import Path
from typing import Any, Mapping

from ..fileio import write_json
from .iteration_log import METRICS_FILE, read_rows
from .merging import MergeUnavailable, merge_apart
from .run_options import TRAINER_OPTIONS
from .runs import CREATED, MERGED, RANK_GLOB, RUN_RECORD, STOP_SIGNALS
from .settings import DEFAULT_MODE, KINETO_DEFAULT, QUIET_KINETO, WARMUP_ITERATIONS, profiler_window
from .trace_files import traced_iterations

RUN_SCHEMA = "goodhart-prof/run/v1"  # as trainer/launch.py writes it


def trainer_only(values: Mapping[str, Any]) -> list[str]:
    """The trainer's flags given with a command: they mean nothing to it (--output-dir does)."""
    given = []
    for option in TRAINER_OPTIONS:
        if option.name == "output_dir":
            continue
        value = values.get(option.name)
        if (option.is_flag and value) or (not option.is_flag and value is not None
                                          and value != option.default):
            given.append(option.flag)
    return given


def command_environment(window: tuple[int, int], mode: str | None, folder: Path,
                        environ: Mapping[str, str], verbose: bool = False) -> dict[str, str]:
    """The command's environment: profiling on, its window and mode (flags win over PROF_*),
    everything written into `folder`, the hooks logging metrics.jsonl, Kineto quiet unless
    `verbose` (a KINETO_LOG_LEVEL the user set wins)."""
    env = dict(environ)
    env.setdefault("KINETO_LOG_LEVEL", KINETO_DEFAULT if verbose else QUIET_KINETO)
    env.update(PROF_ENABLED="1", PROF_ITERATIONS=f"{window[0]}-{window[1]}",
               PROF_MODE=mode or env.get("PROF_MODE", DEFAULT_MODE), PROF_OUTPUT_DIR=str(Path(folder).absolute()),
               PROF_METRICS="1")
    return env


def rank_traces(folder: Path) -> dict[int, Path]:
    """The rank traces the command wrote: rank -> file (`rank-<r>.pt.trace.json.gz`)."""
    found = {}
    for path in Path(folder).glob(RANK_GLOB):
        stem = path.name[len("rank-"):-len(".pt.trace.json.gz")]
        if stem.isdigit():
            found[int(stem)] = path
    return dict(sorted(found.items()))


def untraced_rate(rows: list[dict[str, Any]], window: tuple[int, int]) -> float | None:
    """Env-steps/s over the iterations no profiler slowed, less the first (the trainer's
    whole-run figure, computed the same way): total env steps / total seconds. None when the
    command reported no env steps for them."""
    first = min((r["iteration"] for r in rows), default=0)
    steps = seconds = 0.0
    for row in rows:
        it, n, s = row["iteration"], row.get("env_steps"), row.get("iteration_s")
        if it < first + WARMUP_ITERATIONS or profiler_window(it, *window):
            continue
        if not _number(n) or not _number(s):
            return None
        steps, seconds = steps + n, seconds + s
    return round(steps / seconds, 1) if seconds > 0 else None


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def ended_by(code: int) -> dict[str, Any] | None:
    """run.json's `interrupted` for an exit code: a stop signal ended the command (128 + N)."""
    for signum in STOP_SIGNALS:
        if code == 128 + signum:
            return {"signal": signum.name, "at_iteration": None}
    return None


def record_command_run(folder: Path, command: list[str], code: int, window: tuple[int, int],
                       mode: str, started: float) -> dict[str, Any]:
    """Write the run's run.json (module docstring) and return it; the merge of several rank
    traces happens first. A rank trace that cannot be read back stays unmerged (said on stderr)."""
    import sys

    folder = Path(folder)
    traces = rank_traces(folder)
    rows = read_rows(folder)
    merged = None
    if len(traces) > 1:
        try:
            merge_apart(traces, folder / MERGED)
            merged = folder / MERGED
        except MergeUnavailable as exc:
            sys.stderr.write(f"{folder}: rank traces written, not merged: {exc.module} is not installed\n")
    traced = traced_iterations(traces[min(traces)]) if traces else []
    interrupted = ended_by(code)
    record = {
        "schema": RUN_SCHEMA,
        "created": time.strftime(CREATED),
        "run_dir": str(folder),
        "run_name": folder.resolve().name,
        "kind": "command",
        "command": list(command),
        "exit_code": code,
        "python_version": platform.python_version(),
        "host": socket.gethostname(),
        "device": None,  # the command's device is in its trace (deviceProperties), not known here
        "world_size": max(1, len(traces)),
        "profiling": {"enabled": True, "mode": mode, "iterations": list(window),
                      "iterations_traced": traced, "trace_dir": str(folder)},
        "iterations_run": len({r["iteration"] for r in rows}),
        "env_steps_per_s": untraced_rate(rows, window),
        "wall_s": round(time.perf_counter() - started, 3),
        "traces": {str(r): str(p) for r, p in traces.items()},
        "merged_trace": str(merged) if merged else None,
        "interrupted": interrupted,
        "failed_ranks": [] if code == 0 or interrupted else [{"rank": 0, "exit_code": code}],
    }
    write_json(folder / RUN_RECORD, record)
    return record


def summary(record: dict[str, Any], folder: Path) -> str:
    """The line `run` prints when the command ends: what the folder holds, and why a run is not
    one that analyze and diff will pick up by themselves."""
    parts = [f"run folder: {folder} ({RUN_RECORD})"]
    window = record["profiling"]["iterations"]
    traced = record["profiling"]["iterations_traced"]
    n_ranks = len(record["traces"])
    if traced:
        parts.append(f"{n_ranks} rank trace{'s' if n_ranks != 1 else ''} of iterations "
                     f"{traced[0]}-{traced[-1]} ({record['profiling']['mode']})")
    elif record["iterations_run"]:
        parts.append(f"no trace: the command ran {record['iterations_run']} iterations of hooks.iteration, "
                     f"the window is {window[0]}-{window[1]} (set --iterations)")
    else:
        parts.append("no trace and no iteration logged: does the command call "
                     "goodhart_prof.capture.hooks (make_hooks, hooks.iteration; docs/trainer.md)?")
    rows = record["iterations_run"]
    rate = record["env_steps_per_s"]
    parts.append(f"{rows} iterations in {METRICS_FILE}" + (f", {rate:,.1f} env-steps/s untraced"
                                                           if rate is not None else ""))
    if record["interrupted"]:
        parts.append(f"interrupted by {record['interrupted']['signal']}")
    elif record["failed_ranks"]:
        parts.append(f"the command exited with code {record['exit_code']}")
    return " | ".join(parts)
