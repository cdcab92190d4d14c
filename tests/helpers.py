"""Shared helpers for tests: a tiny trainer config, trace readers, and hand-made trace events."""
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


def X(name, cat, ts, dur, pid=100, tid=100, **args) -> dict:
    """A complete event (`ph: X`) of a hand-made trace, its keyword arguments as its args."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def item_sync_events() -> list[dict]:
    """One `.item()` at 400 us on thread 100: its DtoH copy from pageable memory and the stream
    sync it waits on (a memcpy_dtoh sync point), on GPU 0's stream 7."""
    return [
        X("aten::item", "cpu_op", 400, 50), X("aten::_local_scalar_dense", "cpu_op", 401, 48),
        X("cudaMemcpyAsync", "cuda_runtime", 405, 10, correlation=20),
        X("cudaStreamSynchronize", "cuda_runtime", 420, 25, correlation=21),
        X("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 430, 2, pid=0, tid=7, device=0, stream=7,
          correlation=20, bytes=4),
        X("Stream Sync", "cuda_sync", 420, 25, pid=0, tid=7, device=0, stream=7, correlation=21),
    ]
