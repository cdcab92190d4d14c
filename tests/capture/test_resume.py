"""Issue 32, item 1: `run --resume` never loses what a run recorded.

A finished run is refused (one line, exit 2, nothing in its folder touched), named or found as the
newest run with a checkpoint, and by the trainer itself. A resume that starts after its window
began keeps the earlier trace (it re-records none of it) and its run.json says which iterations
that trace holds. The interrupted run is made by editing a finished run's run.json (an
interruption during iteration 2, after the checkpoint at 2): what `run` then reads is what a
Ctrl-C there writes, without a signal's timing."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import TINY_CONFIG, clean_env, error_lines, step_labels


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY_CONFIG + "warmup = false\n")
    return subprocess.run([sys.executable, "-m", "goodhart_prof.cli", "run", "--config", str(cfg),
                           "--output-dir", str(tmp_path / "traces"), "--no-progress", *args],
                          capture_output=True, text=True, timeout=300,
                          env=clean_env(OMP_NUM_THREADS="1"))


def _state(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run: 3 iterations, window 1-2, a checkpoint after iteration 1 (at 2)."""
    tmp = tmp_path_factory.mktemp("finished")
    res = _run(tmp, "--iterations", "1-2", "--total-iterations", "3", "--checkpoint-every", "2",
               "--name", "r")
    assert res.returncode == 0, res.stderr
    return tmp


@pytest.mark.parametrize("named", [True, False])
def test_resuming_a_finished_run_is_refused(finished, named):
    folder = finished / "traces" / "r"
    before = _state(folder)
    res = _run(finished, "--iterations", "1-2", "--total-iterations", "3", "--resume",
               *(["--name", "r"] if named else []))
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert error_lines(res.stderr) == [
        f"Error: {folder}: this run finished (its run.json records no interruption); --resume "
        f"continues an interrupted run: start a new one"]
    assert _state(folder) == before


def test_the_trainer_refuses_a_finished_run_too(finished):
    folder = finished / "traces" / "r"
    before = _state(folder)
    res = subprocess.run([sys.executable, "-m", "trainer", "--config", str(finished / "tiny.toml"),
                          "--output-dir", str(folder), "--total-iterations", "3", "--resume",
                          "--no-progress"], capture_output=True, text=True, timeout=300,
                         env=clean_env(OMP_NUM_THREADS="1", PROF_ENABLED="1", PROF_ITERATIONS="1-2"))
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert [line for line in error_lines(res.stderr) if line.startswith("Error")] == [
        f"Error: {folder}: this run finished (its run.json records no interruption); --resume "
        f"continues an interrupted run: start a new one"]
    assert _state(folder) == before


@pytest.mark.parametrize("window", ["1-1", "1-2"])
def test_a_resume_after_the_window_began_keeps_its_trace(tmp_path, window):
    """Window 1-1: all of it before the resume point (2); window 1-2: the resume starts inside it
    (a cold start would have replaced the trace of 1-2 by one of 2 alone)."""
    res = _run(tmp_path, "--iterations", window, "--total-iterations", "3", "--checkpoint-every", "2",
               "--name", "r")
    assert res.returncode == 0, res.stderr
    folder = tmp_path / "traces" / "r"
    record = json.loads((folder / "run.json").read_text())
    traced = record["profiling"]["iterations_traced"]
    assert traced == list(range(1, int(window[-1]) + 1))
    record["interrupted"] = {"signal": "SIGINT", "at_iteration": 2}
    (folder / "run.json").write_text(json.dumps(record))
    trace = folder / "rank-0.pt.trace.json.gz"
    kept = (trace.stat().st_mtime_ns, trace.read_bytes())

    res = _run(tmp_path, "--iterations", window, "--total-iterations", "3", "--resume", "--name", "r")
    assert res.returncode == 0, res.stderr
    assert (trace.stat().st_mtime_ns, trace.read_bytes()) == kept
    labels = step_labels(json.loads(gzip.decompress(kept[1]))["traceEvents"])
    assert labels == [f"ProfilerStep#{i}" for i in traced]
    resumed = json.loads((folder / "run.json").read_text())
    assert resumed["interrupted"] is None and resumed["iterations_run"] == 1
    assert resumed["profiling"]["iterations_traced"] == traced
    assert (resumed["traces"], resumed["merged_trace"]) == ({"0": str(trace)}, None)  # one rank: no copy
    assert not (folder / "merged_trace.json").exists()
