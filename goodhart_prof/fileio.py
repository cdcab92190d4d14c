"""Writing files so that a reader never sees half of one: temp file beside the target, then rename.

Torch-free on purpose: every command that writes a file imports this, and most never need torch.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator


@contextlib.contextmanager
def atomic_path(final: Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `final`; rename it over `final` only if the body succeeds."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp" + suffix, dir=final.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
    try:
        yield Path(tmp)
        os.replace(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path: Path, obj: Any, indent: int | None = 2) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=indent, default=str) + "\n")
