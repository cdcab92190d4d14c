"""The source files of user frames: found (absolute, or relative to the trace's folder, its
parent or the current directory), read and parsed once each per analysis (`SourceIndex`), and
each frame's function found in its file (source_lines.py `find_body`). A file edited after the
trace was written is not the code traced and is not read; where the run that wrote the trace
recorded its git revision (run.json), the source is read at that revision from the file's
repository (`recorded_source`): the code traced.
"""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from .source_lines import Body, find_body

MTIME_SLACK_S = 5.0
GIT_TIMEOUT_S = 10.0  # a git call for one file's recorded source: no longer than this
SOURCE_LIMIT = 4 << 20  # a frame's file over 4 MB (a log, data, a generated module) is not read


class SourceIndex:
    """Source files found, read and parsed once each (per analysis)."""

    def __init__(self, roots: list[Path], recorded: float | None = None, revision: str | None = None):
        self.roots = [r for i, r in enumerate(roots) if r not in roots[:i]]
        # a file changed after the trace was written (its mtime past the trace file's, with
        # MTIME_SLACK_S for files written together, e.g. by a checkout) is not the code traced;
        # where the run recorded its git revision and the file's repository has it, the source
        # is read at that revision instead: the code recorded (a fresh clone gives every file
        # one mtime, which proves nothing, and the file may have changed since)
        self.recorded = recorded
        self.revision = revision
        self._trees: dict[str, ast.Module | None] = {}
        self._bodies: dict[tuple[str, str, int], Body | None] = {}

    def tree(self, file: str) -> ast.Module | None:
        if file not in self._trees:
            found = self._find(file)
            self._trees[file] = None if found is None else _parse(*found)
        return self._trees[file]

    def _find(self, file: str) -> tuple[Path, bytes | None] | None:
        """The file and, where the run's git revision gives it, its source at that revision (the
        code recorded, whatever the file holds now); None where no file is the code traced."""
        if file.startswith("<"):
            return None
        p = Path(file)
        tries = [p] if p.is_absolute() else [r / p for r in self.roots]
        for t in tries:
            try:
                if not t.is_file():  # a device, a FIFO or a folder named by a frame: never read
                    continue
                st = t.stat()
                if st.st_size > SOURCE_LIMIT:
                    return None  # no hand-written source is this big: not read, no line claimed
                recorded = None if self.revision is None else recorded_source(t, self.revision)
                if recorded is not None:
                    return (t, recorded) if len(recorded) <= SOURCE_LIMIT else None
                if self.recorded is not None and st.st_mtime > self.recorded + MTIME_SLACK_S:
                    return None  # edited since the trace was written: not the code traced
                return t, None
            except OSError:
                continue
        return None

    def body(self, file: str, function: str, line: int, running: bool = True) -> Body | None:
        """The frame `file(line): function` in its source, or None where it cannot be found;
        `running`: the frame may have been running when tracing began (it opens the thread's
        record), so its line may be the one it was at then rather than its def."""
        key = (file, function, line, running)
        if key not in self._bodies:
            tree = self.tree(file)
            self._bodies[key] = None if tree is None else find_body(tree, function, line, running)
        return self._bodies[key]


def recorded_source(path: Path, revision: str) -> bytes | None:
    """The file's content at git `revision` of its repository; None where that is not known (git
    missing or slow, no repository, the revision or the file not in it)."""
    git = ["git", "-c", "core.fsmonitor=false", "-C"]
    try:
        top = subprocess.run(git + [str(path.parent), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
        if top.returncode != 0:
            return None
        root = Path(top.stdout.strip())
        rel = path.resolve().relative_to(root.resolve()).as_posix()
        blob = subprocess.run(git + [str(root), "show", f"{revision}:{rel}"], capture_output=True,
                              timeout=GIT_TIMEOUT_S)
        return blob.stdout if blob.returncode == 0 else None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def _parse(path: Path, source: bytes | None = None) -> ast.Module | None:
    """The module in source (else the file at path), None where the parser cannot take it."""
    try:
        return ast.parse(path.read_bytes() if source is None else source, filename=str(path))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):  # nesting too deep
        return None
