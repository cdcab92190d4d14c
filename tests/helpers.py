"""Shared helpers for tests that run the trainer: a tiny config and trace readers."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

TINY_CONFIG = """\
n_envs = 16
rollout_steps = 8
epochs = 1
minibatches = 2
grid_size = 9
view_size = 5
n_food = 3
n_decoy = 3
hidden = 32
channels = 4
progress = false
"""


def write_tiny_config(folder: Path) -> Path:
    path = Path(folder) / "tiny.toml"
    path.write_text(TINY_CONFIG)
    return path


def read_trace(path: Path) -> dict:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def step_labels(events: list[dict], pid=None) -> list[str]:
    return sorted((e["name"] for e in events
                   if e.get("name", "").startswith("ProfilerStep#") and e.get("ph") == "X"
                   and (pid is None or e.get("pid") == pid)),
                  key=lambda n: int(n.split("#")[1]))


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROF_")}
    env.update(extra)
    return env


def run_cmd(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env or clean_env(), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def error_lines(stderr: str) -> list[str]:
    """Lines a user would read as the error (profiler chatter on stderr excluded)."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith("USDT:")]
