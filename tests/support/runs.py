"""Run folders as the trainer leaves them, for the tests of making and finding runs."""
from __future__ import annotations

import json
from pathlib import Path


def make_run(root: Path, name: str, created: str | None, *, trace: str | None = "rank-0.pt.trace.json.gz",
             interrupted: dict | None = None, record: bool = True) -> Path:
    """A run folder as the trainer leaves it: run.json (when finished) and its trace file."""
    folder = root / name
    folder.mkdir(parents=True)
    if trace:
        (folder / trace).write_bytes(b"{}")
    if record:
        (folder / "run.json").write_text(json.dumps({"schema": "goodhart-prof/run/v1", "created": created,
                                                     "interrupted": interrupted}))
    return folder
