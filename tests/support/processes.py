"""Watching a trainer run from a test: waiting for a state, its metrics rows, temp files left,
its child processes and whether they still run."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest


def wait_for(predicate, proc: subprocess.Popen, what: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before {what}: {proc.communicate()[1][-2000:]}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"timed out waiting for {what}")


def metrics_rows(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if ".tmp" in p.name)


def descendants(pid: int) -> set[int]:
    """Process ids below `pid` (from /proc; the launcher's ranks are its children)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        kids = {p for p, pp in parents.items() if pp == parent}
        found |= kids
        todo += kids
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def still_running(pids: set[int], grace: float = 5.0) -> list[int]:
    """Those of `pids` still running after a short grace (a helper such as multiprocessing's
    resource tracker notices its parent is gone a moment later)."""
    deadline = time.time() + grace
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]
