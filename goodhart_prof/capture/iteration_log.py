"""The hooks' own metrics.jsonl: one row per finished iteration of any loop, so that a loop we did
not write is judged for noise the way the trainer is (trace/run_record.py reads the rows).

A row is `{"iteration", "iteration_s", "env_steps", "env_steps_per_s"}`: the host's wall time from
entering `hooks.iteration(it)` to leaving it (the window's close, which writes the trace, comes
after the clock stops, so it is in no row), and the env-steps the loop reported for the iteration
(`hooks.iteration(it, env_steps=n)`; null when it reports none). On a GPU the host runs ahead of
the device until something waits for it, so one iteration's host time may hold part of another's
device work; over several iterations they agree with the device's own clock wherever the loop
waits for its results (a loss read, a logging `.item()`) at least once per iteration.

Only rank 0 writes, in append mode, one line per iteration, flushed at once (a run stopped between
two iterations leaves whole lines; a torn last line is skipped by the reader). A write that fails
(a full disk) is said once on stderr and ends the log: the training loop is never stopped for it.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import IO

from ..textsafe import quote_path

METRICS_FILE = "metrics.jsonl"


def check_env_steps(env_steps) -> float | None:
    """`env_steps` as a number (None: not reported); ValueError for anything but a finite number >= 0."""
    if env_steps is None:
        return None
    if isinstance(env_steps, bool) or not isinstance(env_steps, (int, float)) \
            or not math.isfinite(env_steps) or env_steps < 0:
        raise ValueError(f"hooks.iteration(env_steps=...) must be a number of env steps >= 0, "
                         f"not {env_steps!r}")
    return env_steps


class IterationLog:
    """Appends the rows of one process's iterations to `folder/metrics.jsonl`."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / METRICS_FILE
        self._file: IO[str] | None = None
        self._failed = False

    def add(self, iteration: int, seconds: float, env_steps: float | None) -> None:
        if self._failed:
            return
        seconds = round(seconds, 6)  # the rate is of the time the row holds
        row = {"iteration": int(iteration), "iteration_s": seconds,
               "env_steps": env_steps,
               "env_steps_per_s": round(env_steps / seconds, 1) if env_steps is not None and seconds > 0
               else None}
        try:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "a", encoding="utf-8")
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()
        except OSError as exc:
            self._failed = True
            sys.stderr.write(f"goodhart-prof: {quote_path(self.path)}: cannot write "
                             f"({exc.strerror or exc}); per-iteration times are no longer logged\n")
            self.close()

    def close(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError:
                pass


def read_rows(folder: Path) -> list[dict]:
    """The whole rows of `folder/metrics.jsonl` (the trainer's or the hooks'), in file order; a line
    that is not a row (torn by a stop, foreign) is left out: trace/run_record.py, which reads them
    for the reports, warns of such lines. None there: an empty list."""
    rows = []
    try:
        lines = (Path(folder) / METRICS_FILE).read_bytes().split(b"\n")
    except OSError:
        return rows
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("iteration"), int) and not isinstance(row["iteration"], bool):
            rows.append(row)
    return rows

