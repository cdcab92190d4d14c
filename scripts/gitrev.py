"""The code of another git revision, checked out in a temporary worktree (for A/B scripts)."""
from __future__ import annotations

import contextlib
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def worktree_at(rev: str) -> Iterator[Path]:
    """A detached worktree of `rev` for the duration of the block, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="rev-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev],
                       check=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           check=False)
