"""Run folders: each `goodhart-prof run` writes into its own folder under an output root.

    <root>/<name>/     one run: rank-<r>.pt.trace.json.gz, merged_trace.json (several ranks only),
                       run.json, metrics.jsonl
    <root>/latest      the newest complete run: a relative symlink to <name>, or, where the
                       filesystem has no symlinks, a text file holding <name>

The root is `--output-dir`, else PROF_OUTPUT_DIR, else `traces`. A run's name is `--name`, else
the local time it started (`2026-11-23T12-40-55`, `-2`, `-3`, ... when taken). Folders are made
with os.mkdir, which fails when the folder exists: two runs started at once never share one, and a
`--name` that exists is refused, never overwritten. Finding runs to read (the latest,
the last two, a name) is the reading side's: trace/run_folders.py.
Torch-free: the CLI uses it; `run_child` starts the trainer (or a command) and passes signals on to it.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

from ..errors import UserError
from ..fileio import atomic_path, take_folder_lock, write_error
from .settings import DEFAULT_OUTPUT_DIR
from ..textsafe import quote_path

RUN_RECORD = "run.json"
LATEST = "latest"
MERGED = "merged_trace.json"
RANK_GLOB = "rank-*.pt.trace.json.gz"
CHECKPOINT = "checkpoint-rank0.pt"  # rank 0's, as the trainer's --resume reads it
TIMESTAMP = "%Y-%m-%dT%H-%M-%S"  # a folder name: no colons (they trouble other filesystems)
CREATED = "%Y-%m-%dT%H:%M:%S%z"  # run.json `created`: trainer/launch.py writes it with this


def output_root(given: str | os.PathLike | None, environ: Mapping[str, str]) -> Path:
    """The folder that holds the run folders: `given` (--output-dir, --root), else
    PROF_OUTPUT_DIR, else `traces`."""
    return Path(given or environ.get("PROF_OUTPUT_DIR") or DEFAULT_OUTPUT_DIR)


def check_name(name: str) -> str:
    """A --name must be one plain folder name that is not `latest` or hidden."""
    if (not name or name.strip() != name or name in (".", "..", LATEST) or name.startswith(".")
            or "/" in name or "\\" in name or "\0" in name):
        raise UserError(f"--name {name!r}: a run name is one folder name (no '/', not hidden, "
                        f"not {LATEST!r})")
    return name


def create_run_folder(root: Path, name: str | None = None, now: float | None = None) -> Path:
    """Make `<root>/<name>` (or `<root>/<timestamp>`, suffixed `-2`, `-3`, ... when taken) and
    return it. The folder is new: os.mkdir fails on an existing one, so nothing is overwritten."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(root, exc) from None
    if name is not None:
        folder = root / check_name(name)
        try:
            folder.mkdir()
        except FileExistsError:
            raise UserError(f"{quote_path(folder)}: a run named {name!r} already exists; choose another "
                            f"--name (or --resume it)") from None
        except OSError as exc:
            raise write_error(folder, exc) from None
        return folder
    stamp = time.strftime(TIMESTAMP, time.localtime(now))
    for k in range(1, 1000):
        folder = root / (stamp if k == 1 else f"{stamp}-{k}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
        except OSError as exc:
            raise write_error(folder, exc) from None
    raise UserError(f"{quote_path(root)}: 999 runs already named {stamp}; give this one a --name")


def has_trace(folder: Path) -> bool:
    return (folder / MERGED).is_file() or any(folder.glob(RANK_GLOB))


def run_folders(root: Path) -> list[Path]:
    """The folders directly under root that may be runs (`latest`, hidden names, links skipped)."""
    try:
        entries = list(Path(root).iterdir())
    except OSError:
        return []
    return sorted(p for p in entries if p.name != LATEST and not p.name.startswith(".")
                  and not p.is_symlink() and p.is_dir())


def read_latest(root: Path) -> Path | None:
    """The folder `<root>/latest` names (symlink or text file); None without one."""
    pointer = Path(root) / LATEST
    try:
        if pointer.is_symlink():
            return Path(root) / os.readlink(pointer)
        if pointer.is_file():
            name = pointer.read_text().strip()
            return Path(root) / name if name else None
    except OSError:
        return None
    return None


def point_latest(root: Path, folder: Path) -> str:
    """Make `<root>/latest` name `folder` (a child of root), replaced atomically: a new relative
    symlink renamed over the old pointer, or where symlinks cannot be made a text file holding the
    name (written beside and renamed). Returns `symlink` or `file`."""
    root, name = Path(root), Path(folder).name
    link = root / f".{LATEST}.{os.getpid()}.tmp"
    try:
        link.unlink(missing_ok=True)
        os.symlink(name, link, target_is_directory=True)
    except (OSError, NotImplementedError):
        with atomic_path(root / LATEST) as tmp:
            tmp.write_text(name + "\n")
        return "file"
    try:
        os.replace(link, root / LATEST)
    except OSError:
        link.unlink(missing_ok=True)
        raise
    return "symlink"


def resume_folder(root: Path, name: str | None) -> Path:
    """The run `--resume` continues: the one --name names, else the newest run folder under
    root with a checkpoint (by the checkpoint's modification time: an interrupted run has no
    complete record, and a killed one no run.json at all). A run that finished is refused
    (`refuse_finished`): resuming it would train again and replace its traces."""
    if name is not None:
        folder = Path(root) / check_name(name)
        if not folder.is_dir():
            raise UserError(f"{quote_path(folder)}: no run named {name!r} to resume")
        return check_free(refuse_finished(folder))
    found = []
    for folder in run_folders(root):
        try:
            found.append(((folder / CHECKPOINT).stat().st_mtime_ns, folder.name, folder))
        except OSError:
            continue
    if not found:
        raise UserError(f"{quote_path(root)}: no run with a checkpoint to resume (write them with "
                        f"--checkpoint-every N, or name the run with --name)")
    return check_free(refuse_finished(max(found)[2]))


RUN_JSON_LIMIT = 64 << 20  # a run.json is a few KB; a bigger one is not ours (read as unknown)


def finished_record(folder: Path) -> dict[str, Any] | None:
    """The run.json of `folder` when it says the run finished (no `interrupted`, no
    `failed_ranks`); None without one, for one that cannot be read, or for a run that stopped
    early: that is the run `--resume` continues. Plain json, no msgspec: the trainer calls it."""
    import json

    path = Path(folder) / RUN_RECORD
    try:
        if path.stat().st_size > RUN_JSON_LIMIT:
            return None
        record = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("interrupted") is not None or record.get("failed_ranks"):
        return None
    return record


def refuse_finished(folder: Path) -> Path:
    """folder, unless its run finished: then one line (exit 2) before anything is touched."""
    if finished_record(folder) is not None:
        raise UserError(f"{quote_path(folder)}: this run finished (its run.json records no "
                        f"interruption); --resume continues an interrupted run: start a new one")
    return folder


def check_free(folder: Path) -> Path:
    """folder, unless a live run holds its lock (the trainer holds it while it runs): then a
    one-line error now, not after the trainer has started (the trainer's own lock decides a race)."""
    os.close(take_folder_lock(folder, "run"))
    return folder


def discard_if_empty(folder: Path) -> None:
    """Remove a folder left empty: a run folder the trainer wrote nothing into (it stopped on a
    bad flag or config), the root `run` made for it."""
    try:
        folder.rmdir()  # fails unless empty
    except OSError:
        pass


# The signals that stop a run (as trainer/signals.py's STOP_SIGNALS: the toolkit never imports it).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_child(argv: list[str], env: Mapping[str, str], unblocked: bool = False) -> int:
    """Start the trainer (or a user's command), pass it every SIGINT, SIGTERM and SIGHUP this
    process gets, and return its exit code (128 + N when a signal N killed it, as a shell says).

    The trainer runs in its own process group, so a Ctrl-C at the terminal reaches it once, from
    here, as a `kill -INT` of this process alone does: the trainer records the interruption and
    exits 128 + N (a second signal while it does stops it at once). The signals are blocked from
    before the trainer starts until they are passed on: one that comes while the interpreter
    starts waits for the trainer's handler (trainer/signals.py) instead of killing it mid-import.
    SIGHUP this process was started ignoring (`nohup`) stays ignored; SIGINT and SIGTERM are
    passed on even when ignored at the start (a shell starts `cmd &` ignoring SIGINT: `kill -INT`
    of it must still stop the run).

    `unblocked`: a user's command starts with the signals unblocked (the child inherits the mask,
    and nothing in a command we did not write would unblock them): a signal while it starts acts
    on it as on any program."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        proc = subprocess.Popen(argv, env=dict(env), process_group=0,
                                preexec_fn=_unblock_stop_signals if unblocked else None)
        forwarded = [s for s in STOP_SIGNALS  # SIGHUP ignored by `nohup` stays ignored
                     if s != signal.SIGHUP or signal.getsignal(s) != signal.SIG_IGN]
        previous = {s: signal.signal(s, lambda signum, frame: proc.send_signal(signum))
                    for s in forwarded}
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # a held one is passed on now
    try:
        code = proc.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return code if code >= 0 else 128 - code


def _unblock_stop_signals() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


@contextlib.contextmanager
def stop_signals_held() -> Iterator[None]:
    """The stop signals wait while the body runs (`run` holds them from before it makes the run's
    folder until the trainer can be told: a Ctrl-C then never leaves an empty folder behind);
    the signal mask is as it was afterwards."""
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)

