"""Folders whose writes fail for real: a small tmpfs (disk full) and a read-only bind mount.

Both need mount(2) (root with CAP_SYS_ADMIN, as on the project's machines). Where it is not
allowed, `small_disk` and `read_only` yield None and the tests that need them say so and skip;
each failure is also made in-process by tests that always run (a refused write, a short write).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator


def _mount(*args: str) -> bool:
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def _umount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@contextlib.contextmanager
def small_disk(folder: Path, size: str = "64k") -> Iterator[Path | None]:
    """`folder` as an empty tmpfs of `size` (yields None where mounting is not allowed)."""
    folder.mkdir(parents=True, exist_ok=True)
    if not _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)):
        yield None
        return
    try:
        yield folder
    finally:
        _umount(folder)


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[Path | None]:
    """`folder` (with what it holds now) remounted read-only over itself; None where not allowed.
    Root can write into a chmod 555 folder, not into a read-only mount."""
    folder.mkdir(parents=True, exist_ok=True)
    if not _mount("--bind", str(folder), str(folder)):
        yield None
        return
    try:
        if not _mount("-o", "remount,ro,bind", str(folder)):
            yield None
            return
        yield folder
    finally:
        _umount(folder)


def fill(folder: Path, leave: int = 0) -> None:
    """Fill the filesystem of `folder` until only `leave` bytes (whole blocks) are free."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))
