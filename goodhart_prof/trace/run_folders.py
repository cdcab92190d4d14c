"""Finding the runs to read under an output root (capture/runs.py makes them): the run a folder
holds, the complete runs oldest first, the latest, the last two, and what a name on the command line
means. The reading side: run.json is read with its checks (trace/run_json.py, msgspec).

A run is **complete** when its run.json reads, was not interrupted, no rank of it failed, and the
folder holds its trace; runs are ordered by run.json `created` (when the run finished), then
run.json's modification time, then name.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..capture.runs import CREATED, LATEST, RUN_RECORD, has_trace, read_latest, run_folders
from ..errors import UserError
from ..textsafe import quote_path
from .run_json import read_run_json


@dataclass(frozen=True)
class Run:
    """One run folder that holds a readable run.json."""

    folder: Path
    record: dict[str, Any]
    order: tuple[float, int, str]  # (created, run.json mtime in ns, name): oldest first

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def created(self) -> str:
        return str(self.record.get("created") or "")

    @property
    def complete(self) -> bool:
        """Finished (not interrupted, no rank failed) and its trace is in the folder."""
        return (self.record.get("interrupted") is None and not self.record.get("failed_ranks")
                and has_trace(self.folder))

    def describe(self) -> str:
        """`traces/2026-11-23T12-40-55 (2026-11-23T12:40:58+0000)`, as the diff line prints it."""
        return f"{self.folder} ({self.created})" if self.created else str(self.folder)


def run_in(folder: Path) -> Run | None:
    """The run in `folder`; None when it holds no readable run.json (an unfinished run)."""
    path = Path(folder) / RUN_RECORD
    try:
        record = read_run_json(path)  # size, nesting and the fields' types checked
        stat = path.stat()
    except (OSError, UserError):
        return None
    return Run(Path(folder), record, (_created(record.get("created"), folder), stat.st_mtime_ns,
                                      Path(folder).name))


def _created(text: Any, folder: Path) -> float:
    """run.json `created` as seconds since the epoch, else the folder's modification time."""
    try:
        return datetime.strptime(str(text), CREATED).timestamp()
    except ValueError:
        try:
            return folder.stat().st_mtime
        except OSError:
            return 0.0


def complete_runs(root: Path) -> list[Run]:
    """The complete runs under root, oldest first."""
    runs = [run for run in map(run_in, run_folders(root)) if run is not None and run.complete]
    return sorted(runs, key=lambda run: run.order)


def last_two(root: Path) -> tuple[Run, Run]:
    """The two newest complete runs (older, newer): what `diff` compares with no arguments."""
    runs = complete_runs(root)
    if len(runs) < 2:
        found = "no complete run" if not runs else f"one complete run ({runs[0].folder})"
        raise UserError(f"{quote_path(root)}: {found}; diff with no arguments compares the last two runs "
                        f"(make them with goodhart-prof run, or name two traces: diff A B)")
    return runs[-2], runs[-1]


def latest_run(root: Path) -> Run:
    """The run `<root>/latest` names when it names a complete run, else the newest complete run."""
    pointed = read_latest(root)
    run = run_in(pointed) if pointed is not None else None
    if run is not None and run.complete:
        return run
    runs = complete_runs(root)
    if not runs:
        raise UserError(f"{quote_path(root)}: no complete run (make one with goodhart-prof run, or give a path)")
    return runs[-1]


def resolve(arg: str, root: Path) -> Path:
    """A diff/analyze argument: an existing path as it is (a run folder is a folder of rank traces
    the loader reads), else the run of that name under root (`latest` included)."""
    path = Path(arg)
    if path.name == LATEST and (path.is_symlink() or path.is_file()):  # a pointer, either kind
        return latest_run(path.parent).folder
    if path.exists():
        return path
    if arg == LATEST:
        return latest_run(root).folder
    if "/" not in arg and "\\" not in arg and (Path(root) / arg).is_dir():
        return Path(root) / arg
    raise UserError(f"{quote_path(arg)}: no such trace file or folder, nor a run named so under {root}")
