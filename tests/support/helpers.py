"""Shared helpers for tests: a tiny trainer config, trace readers, and hand-made trace events."""
from __future__ import annotations

import bisect
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from tests.support.events import X

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


# -- an independent reading of a raw trace: the GPU's idle time and who held it ---------------------
# Written from the definitions in docs/DESIGN.md (burstiness, idle causes) as one plain loop over
# the raw JSON events, not from the package's code: tests compare the package's figures with it.
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_CATS = ("cpu_op", "user_annotation")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")


def merged(intervals) -> list[tuple[float, float]]:
    """Intervals (start, end) merged where they touch or overlap: a sort and a running end."""
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def covered(busy: list[tuple[float, float]], lo: float, hi: float) -> float:
    """How much of [lo, hi) the intervals cover; `busy` already merged (sorted, disjoint)."""
    i = max(bisect.bisect_right(busy, (lo, float("inf"))) - 1, 0)  # the last one starting by lo
    total = 0.0
    while i < len(busy) and busy[i][0] < hi:
        total += max(0.0, min(busy[i][1], hi) - max(busy[i][0], lo))
        i += 1
    return total


def _runtime_kind(name: str, dur: float) -> str | None:
    """The kinds of runtime/driver call that hold the host (DESIGN.md, idle causes), by substring."""
    for kind, words in (("module", ("ModuleLoad", "LibraryLoad")), ("alloc", ("Malloc", "HostAlloc")),
                        ("free", ("Free",)), ("sync", ("Synchronize",))):
        if any(w in name for w in words):
            return kind
    if name in ("cudaMemcpy", "hipMemcpy", "hipMemcpyWithStream"):
        return "sync"
    if "LaunchKernel" in name and dur >= 1000:
        return "launch"
    return None


def idle_split(events: list[dict], steps: list[tuple[float, float]] = ()) -> dict:
    """One GPU's busy time, idle gaps and their causes, from the raw events of a one-GPU trace.

    busy: the GPU activities' intervals merged by a sort and a running end. gaps: between
    consecutive merged stretches, plus, inside each step (start, end), the time before the first
    activity and after the last. Each gap is read off the thread that launched its opening
    activity (the runtime call with the activity's correlation id; the earliest-launched among
    activities starting together; the trailing step edge has none: the thread that launched the
    most activities), cut at that thread's host events, each piece given to the innermost cpu op
    or annotation over it (latest start, then shortest; ProfilerStep#N skipped), or to the
    outermost runtime call of a holding kind over it; else to None. Returns
    {"busy": [(s, e)], "gaps": [(s, e)], "idle_us": float, "causes": {name: us}}."""
    acts = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e.get("args", {}).get("correlation"))
                  for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS)
    launches = {e["args"]["correlation"]: (float(e["ts"]), (e["pid"], e["tid"]))
                for e in events if e.get("ph") == "X" and e.get("cat") in RUNTIME_CATS
                and e.get("args", {}).get("correlation", -1) != -1}
    busy = merged([(s, e) for s, e, _ in acts])
    threads: dict = {}
    for _, _, c in acts:
        if c in launches:
            threads[launches[c][1]] = threads.get(launches[c][1], 0) + 1
    main = max(sorted(threads), key=lambda k: threads[k]) if threads else None

    starting: dict = {}
    for s, _, c in acts:
        if c in launches:
            starting.setdefault(s, []).append(launches[c])

    def opener_thread(t: float):
        return min(starting[t])[1] if t in starting else main

    gaps = [(busy[i][1], busy[i + 1][0], opener_thread(busy[i + 1][0])) for i in range(len(busy) - 1)]
    for a, b in steps:
        if busy and a < busy[0][0]:
            gaps.append((a, min(b, busy[0][0]), opener_thread(busy[0][0])))
        if busy and b > busy[-1][1]:
            gaps.append((max(a, busy[-1][1]), b, main))
    causes: dict = {}
    by_thread: dict = {}
    for e in events:
        if e.get("ph") != "X" or (e["pid"], e["tid"]) not in threads and (e["pid"], e["tid"]) != main:
            continue
        if e.get("cat") in HOST_CATS and not str(e["name"]).startswith("ProfilerStep#"):
            by_thread.setdefault((e["pid"], e["tid"]), []).append(
                ("host", float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"]))
        elif e.get("cat") in RUNTIME_CATS and _runtime_kind(e["name"], float(e["dur"])):
            by_thread.setdefault((e["pid"], e["tid"]), []).append(
                ("runtime", float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"]))
    spans = {k: (np.array([h[1] for h in v]), np.array([h[2] for h in v])) for k, v in by_thread.items()}
    for a, b, thread in gaps:
        if b <= a:
            continue
        if thread not in spans:
            causes[None] = causes.get(None, 0.0) + (b - a)
            continue
        starts, ends = spans[thread]
        near = [by_thread[thread][i] for i in np.flatnonzero((starts < b) & (ends > a))]
        cuts = sorted({a, b} | {t for h in near for t in h[1:3] if a < t < b})
        for lo, hi in zip(cuts, cuts[1:]):
            over = [h for h in near if h[1] <= lo and h[2] >= hi]
            calls = [h for h in over if h[0] == "runtime"]
            ops = [h for h in over if h[0] == "host"]
            if calls:
                who = min(calls, key=lambda h: (h[1], -h[2]))[3]
            elif ops:
                who = max(ops, key=lambda h: (h[1], -h[2]))[3]
            else:
                who = None
            causes[who] = causes.get(who, 0.0) + (hi - lo)
    return {"busy": busy, "gaps": [(a, b) for a, b, _ in gaps if b > a],
            "idle_us": sum(b - a for a, b, _ in gaps if b > a), "causes": causes}


def run_main(args: list[str], capsys) -> tuple[int, str, str]:
    """The CLI's `main(args)` in this process: its exit code, stdout and stderr (pytest's capsys)."""
    import pytest
    from goodhart_prof.cli import main
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err
