"""Writing files so that a reader never sees half of one: temp file beside the target, then rename.

Every file the tool writes goes through `atomic_path` (the low level: OSError as it comes) or
`writing` (the same, with a failure turned into the one-line `WriteError`, `PATH: cannot write:
REASON`, exit 2: what a command shows its user). With `exclusive` (an output the user named, written
without --force) the final name is created, never replaced: the temporary is hard-linked to it
(`os.link` fails when the name exists, atomically) and then unlinked, so of N concurrent writers
exactly one succeeds and the others get `OutputExists` (`PATH: already exists (use --force to
replace it)`) and leave nothing behind. Where the filesystem has no hard links, the name is taken
with `O_CREAT | O_EXCL` (still exactly one winner) and the temporary renamed over the empty file
it made: a reader may then see an empty file for a moment, never a half-written one. The temporary file is
`.<name>.<pid>.<random>.tmp<suffix>` beside the target, held under an exclusive `flock` while it
is written; a writer killed before its rename (SIGKILL, a crash) leaves it behind, and the next
write of the same final file removes such stale temporaries: those whose writer process is gone
and whose lock is free (a concurrent writer's temporary is never touched).

`folder_lock` holds an exclusive `flock` on a folder itself (no lock file is left behind; the
kernel releases it when the process dies, so a killed run never leaves a stale lock).
`exclusive_lock` is the one place a lock is taken (these, and perflog's log lock).

Torch-free on purpose: every command that writes a file imports this, and most never need torch.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterator

from .errors import UserError
from .textsafe import quote_path


class OutputExists(UserError):
    """The output the user named exists and --force was not given: one line, exit 2."""

    def __init__(self, path: str | os.PathLike):
        super().__init__(f"{quote_path(path)}: already exists (use --force to replace it)")
        self.path = Path(path)


class WriteError(UserError):
    """An output that cannot be written: `PATH: cannot write: REASON` (exit 2)."""

    def __init__(self, path: str | os.PathLike, reason: str):
        super().__init__(f"{quote_path(path)}: cannot write: {reason}")
        self.path, self.reason = Path(path), reason


def write_reason(exc: OSError, final: Path) -> str:
    """What the system said, in words a user can act on: a parent that is a file is named."""
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):
        for parent in [*reversed(Path(final).parents), Path(final)]:
            if parent.exists() and not parent.is_dir():
                return f"{quote_path(parent)} is a file, not a folder"
    return exc.strerror or str(exc)


def write_error(final: str | os.PathLike, exc: OSError) -> WriteError:
    return WriteError(final, write_reason(exc, Path(final)))


def make_parent(final: Path) -> None:
    """Make the folder `final` goes in (a missing folder is created, as every writer does)."""
    Path(final).parent.mkdir(parents=True, exist_ok=True)


@contextlib.contextmanager
def atomic_path(final: Path, suffix: str = "", exclusive: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside `final`; rename it over `final` only if the body succeeds
    (with `exclusive`: create `final` from it, OutputExists when the name is taken).

    Stale temporaries of `final` (module docstring) are removed first; the new one is locked
    until it is renamed or removed."""
    final = Path(final)
    make_parent(final)
    remove_stale_temporaries(final)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.{os.getpid()}.", suffix=".tmp" + suffix,
                               dir=final.parent)
    try:
        exclusive_lock(fd)  # a new file: never busy; a filesystem without flock: the pid guards it
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        yield Path(tmp)
        if exclusive:
            publish_new(Path(tmp), final)
        else:
            os.replace(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        os.close(fd)  # releases the lock (after the unlink: a cleaner never sees it free)


# errnos of a filesystem (or a policy, e.g. protected_hardlinks) that refuses hard links
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK, errno.EXDEV,
             errno.EACCES}


def publish_new(tmp: Path, final: Path) -> None:
    """Give the finished temporary `tmp` the name `final`, which must not exist: OutputExists
    when it does (another writer won, or a file appeared since the command checked)."""
    try:
        os.link(tmp, final, follow_symlinks=False)
        return  # the caller unlinks tmp
    except FileExistsError:
        raise OutputExists(final) from None
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
    try:  # no hard links here: take the name with O_EXCL, then rename over our own empty file
        os.close(os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except FileExistsError:
        raise OutputExists(final) from None
    try:
        os.replace(tmp, final)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(final)  # the empty file we made, not anyone's output
        raise


@contextlib.contextmanager
def writing(final: str | os.PathLike, suffix: str = "", exclusive: bool = False) -> Iterator[Path]:
    """`atomic_path` for an output a command writes: any OSError (disk full, read-only folder,
    a parent that is a file) becomes `WriteError` naming `final`; the old file is untouched.
    `exclusive`: see atomic_path (an existing `final` gives OutputExists)."""
    try:
        with atomic_path(Path(final), suffix, exclusive) as tmp:
            yield tmp
    except OSError as exc:
        raise write_error(final, exc) from None


# After `.<name>`: `.<pid>.<random>.tmp` and the writer's suffix (`.gz`, `.md`, `.html`, or none);
# the trace writer's JSON beside its gzip is `.tmp.json`, and Kineto's own temporary of it `.tmp.json.tmp`.
_TEMP = re.compile(r"\.(?P<pid>\d+)\.[a-z0-9_]+\.tmp(?:\.[A-Za-z0-9]+){0,2}")


def remove_stale_temporaries(final: Path) -> list[Path]:
    """Remove the temporaries of `final` that a dead writer left (pid gone and lock free);
    returns them. Never fails: a temporary that cannot be removed stays."""
    final = Path(final)
    prefix = f".{final.name}"
    removed = []
    try:
        names = [n for n in os.listdir(final.parent) if n.startswith(prefix + ".")]
    except OSError:
        return removed
    for name in names:
        m = _TEMP.fullmatch(name, len(prefix))
        if m is None:
            continue
        if _alive(int(m.group("pid"))):
            continue
        path = final.parent / name
        if _remove_if_unlocked(path):
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # ours: another write of this process may be filling it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0  # exists, another user's; an impossible pid is nobody's
    return True


def _remove_if_unlocked(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    if not exclusive_lock(fd):  # a live writer holds it (in another pid namespace, say)
        os.close(fd)
        return False
    try:
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path: Path, obj: Any, indent: int | None = 2) -> None:
    with writing(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=indent, default=str) + "\n")


class FolderBusy(UserError):
    """Another process holds the folder's lock: one line, exit 2."""


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, what: str = "run") -> Iterator[None]:
    """Hold an exclusive flock on `folder` itself for the body; a second holder gets FolderBusy
    at once (never waits). The kernel drops the lock when the process ends, however it ends."""
    fd = take_folder_lock(folder, what)
    try:
        yield
    finally:
        os.close(fd)


def take_folder_lock(folder: str | os.PathLike, what: str = "run") -> int:
    """The open, locked folder (close the fd to release it); FolderBusy when another holds it."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise write_error(folder, exc) from None
    if exclusive_lock(fd) is False:  # None: a filesystem without flock, nothing to hold
        os.close(fd)
        raise FolderBusy(f"{quote_path(folder)}: another {what} is writing into this folder; wait for it "
                         f"to finish or use another folder")
    return fd


def exclusive_lock(fd: int, wait: bool = False) -> bool | None:
    """Take an exclusive `flock` on an open file or folder, held until the fd is closed (the
    kernel drops it when the process ends, however it ends). True: held; False: another process
    holds it (never returned with `wait`, which blocks until it is free); None: this filesystem
    has no flock (some network mounts), so there is nothing to hold."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return None
    return True
