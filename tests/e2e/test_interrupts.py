"""Interrupted, killed and repeated runs: SIGINT/SIGTERM leave a complete trace of a finished
window or none, run.json records the interruption, the exit code is 128 + the signal; a run
killed with SIGKILL after a checkpoint resumes to the same parameters; a second run in a folder
says which files it replaces."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from goodhart_prof.trace.load import load
from tests.support.helpers import clean_env, read_trace, run_cmd, step_labels, write_tiny_config
from tests.support.paths import ROOT
from tests.support.processes import descendants, leftovers, metrics_rows, still_running, wait_for

pytestmark = pytest.mark.slow
# One torch thread: the tiny runs then keep their pace when another process holds a core
# (two spinning OpenMP threads on a shared core run ~10x slower).
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def env(**extra: str) -> dict[str, str]:
    return clean_env(**ONE_THREAD, **extra)


def start(args: list[str], environ: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], env=environ or env(), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("signum,window,code", [
    (signal.SIGINT, "3-390", 130),   # inside an unfinished window: no trace at all
    (signal.SIGTERM, "2-3", 143),    # after a finished window: its complete rank trace
], ids=["SIGINT-in-window", "SIGTERM-after-window"])
def test_interrupted_trainer_records_it(tmp_path, signum, window, code):
    cfg = write_tiny_config(tmp_path)
    out = tmp_path / "out"
    proc = start(["-m", "trainer", "--config", str(cfg), "--total-iterations", "400",
                  "--output-dir", str(out)], env(PROF_ENABLED="1", PROF_ITERATIONS=window))
    wait_for(lambda: len(metrics_rows(out)) >= 6, proc, "iteration 6")
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    record = json.loads((out / "run.json").read_text())
    rows = metrics_rows(out)
    stop = record["interrupted"]
    assert stop["signal"] == signal.Signals(signum).name
    assert stop["at_iteration"] == len(rows) == record["iterations_run"] >= 6
    assert [r["iteration"] for r in rows] == list(range(len(rows)))
    assert f"interrupted by {stop['signal']} at iteration {stop['at_iteration']}" in stderr
    assert leftovers(out) == []
    if window == "3-390":
        assert not list(out.glob("*trace*"))
        assert record["profiling"]["iterations_traced"] == [] and record["merged_trace"] is None
        assert record["traces"] == {}
    else:
        events = read_trace(out / "rank-0.pt.trace.json.gz")["traceEvents"]
        assert step_labels(events) == ["ProfilerStep#2", "ProfilerStep#3"]
        assert record["profiling"]["iterations_traced"] == [2, 3]
        assert record["traces"] == {"0": str(out / "rank-0.pt.trace.json.gz")}
        assert record["merged_trace"] is None and not (out / "merged_trace.json").exists()  # one rank: no copy
        assert f"| the finished window 2-3 is in {out / 'rank-0.pt.trace.json.gz'} |" in stderr
        trace = load(out)
        assert trace.paths == [out / "rank-0.pt.trace.json.gz"] and len(trace.events) > 0


def test_goodhart_prof_run_passes_sigterm_on(tmp_path):
    cfg = write_tiny_config(tmp_path)
    out = tmp_path / "traces" / "stopped"
    proc = start(["-m", "goodhart_prof.cli", "run", "--iterations", "3-390", "--total-iterations",
                  "400", "--config", str(cfg), "--output-dir", str(out.parent), "--name", "stopped",
                  "--no-progress"])
    wait_for(lambda: len(metrics_rows(out)) >= 5, proc, "iteration 5")
    children = descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)  # to the CLI only, as `kill` or a job scheduler would
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr
    record = json.loads((out / "run.json").read_text())
    assert record["interrupted"]["signal"] == "SIGTERM" and record["merged_trace"] is None
    assert not list(out.glob("*trace*")) and leftovers(out) == []
    assert still_running(children) == []
    assert not (out.parent / "latest").exists()  # an interrupted run is not a complete one


def test_two_ranks_sigterm_to_the_launcher_stops_the_ranks(tmp_path):
    cfg = write_tiny_config(tmp_path)
    out = tmp_path / "out"
    proc = start(["-m", "trainer", "--config", str(cfg), "--total-iterations", "400", "--nproc", "2",
                  "--output-dir", str(out)], env(PROF_ENABLED="1", PROF_ITERATIONS="2-390"))
    wait_for(lambda: len(metrics_rows(out)) >= 4, proc, "iteration 4")
    ranks = descendants(proc.pid)
    assert ranks
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr[-3000:]
    assert time.monotonic() - started < 30  # the ranks stopped on the signal, not on a timeout
    assert "Traceback" not in stderr
    assert still_running(ranks) == []
    record = json.loads((out / "run.json").read_text())
    assert record["world_size"] == 2 and record["interrupted"]["signal"] == "SIGTERM"
    assert record["interrupted"]["at_iteration"] == len(metrics_rows(out)) >= 4
    assert not list(out.glob("*trace*")) and leftovers(out) == []


def _params(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=False)["policy"]


def test_sigkill_after_a_checkpoint_then_resume_is_bit_identical(tmp_path):
    cfg = write_tiny_config(tmp_path)
    straight, split = tmp_path / "straight", tmp_path / "split"
    base = ["-m", "trainer", "--config", str(cfg), "--checkpoint-every", "3", "--seed", "5",
            "--total-iterations"]
    total = 30
    res = run_cmd(base + [str(total), "--output-dir", str(straight)], env=env())
    assert res.returncode == 0, res.stderr
    first = start(base + ["1000", "--output-dir", str(split)])
    checkpoint = split / "checkpoint-rank0.pt"
    wait_for(checkpoint.exists, first, "the first checkpoint")
    first.send_signal(signal.SIGKILL)  # no cleanup at all
    first.communicate(timeout=30)
    assert first.returncode == -signal.SIGKILL
    killed_at = torch.load(checkpoint, weights_only=False)["iteration"]
    assert killed_at < total and killed_at % 3 == 0, killed_at
    res = run_cmd(base + [str(total), "--output-dir", str(split), "--resume"], env=env())
    assert res.returncode == 0, res.stderr
    a, b = _params(straight / "checkpoint-rank0.pt"), _params(checkpoint)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    # The rows the killed run wrote after its checkpoint were dropped and written again.
    rows = metrics_rows(split)
    assert [r["iteration"] for r in rows] == list(range(total))
    timing = {"iteration_s", "env_steps_per_s"}
    assert [{k: v for k, v in r.items() if k not in timing} for r in rows] == \
        [{k: v for k, v in r.items() if k not in timing} for r in metrics_rows(straight)]
    assert leftovers(split) == []


def test_a_second_trainer_run_in_one_folder_says_what_it_replaces(tmp_path):
    """`python -m trainer --output-dir X` writes into X itself (goodhart-prof run gives each run
    its own folder: tests/capture/test_runs.py)."""
    cfg = write_tiny_config(tmp_path)
    out = tmp_path / "traces"
    args = ["-m", "trainer", "--total-iterations", "2", "--config", str(cfg),
            "--output-dir", str(out), "--no-progress"]
    first = run_cmd(args, env=env(PROF_ENABLED="1", PROF_ITERATIONS="1"))
    assert first.returncode == 0 and "replacing" not in first.stderr, first.stderr
    (out / "rank-3.pt.trace.json.gz").write_bytes(b"from a run with more ranks")
    (out / "merged_trace.json").write_bytes(b"from a run with more ranks")
    (out / ".run.json.abc123.tmp").write_bytes(b"left by a killed run")
    before = json.loads((out / "run.json").read_text())["created"]
    second = run_cmd(args + ["--seed", "7"], env=env(PROF_ENABLED="1", PROF_ITERATIONS="1"))
    assert second.returncode == 0, second.stderr
    lines = [line for line in second.stderr.splitlines() if line.startswith("replacing")]
    assert len(lines) == 1, second.stderr
    for name in ("run.json", "metrics.jsonl", "rank-0.pt.trace.json.gz", "rank-3.pt.trace.json.gz",
                 "merged_trace.json", ".run.json.abc123.tmp"):
        assert str(out / name) in lines[0], (name, lines[0])
    assert lines[0].startswith("replacing 6 file(s) of an earlier run: ")
    assert sorted(p.name for p in out.iterdir()) == ["metrics.jsonl", "rank-0.pt.trace.json.gz", "run.json"]
    record = json.loads((out / "run.json").read_text())
    assert record["config"]["seed"] == 7 and record["interrupted"] is None
    assert [r["iteration"] for r in metrics_rows(out)] == [0, 1]
    assert record["created"] >= before
