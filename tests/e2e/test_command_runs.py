"""`goodhart-prof run -- python LOOP.py`: a user's loop (tests/data/ours/loops/counted_loop.py) as a
first-class run: its own folder, metrics.jsonl from the hooks, run.json, `latest`, `analyze` and
`diff` with no argument, a failure or a signal recorded, the trainer's options refused."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import pytest

from tests.support.helpers import clean_env, error_lines, run_cmd
from tests.support.paths import DATA
from tests.support.processes import descendants, leftovers, still_running, wait_for

pytestmark = pytest.mark.slow
LOOP = DATA / "ours" / "loops" / "counted_loop.py"
ENV = {"OMP_NUM_THREADS": "1"}


def _run(tmp_path, *loop_args, window="3-5", extra=()):
    return run_cmd(["-m", "goodhart_prof.cli", "run", "--iterations", window, "--output-dir", "runs",
                    *extra, "--", sys.executable, str(LOOP), *loop_args], env=clean_env(**ENV), cwd=tmp_path)


def _folders(root):
    return sorted(p for p in root.iterdir() if p.name != "latest")


def test_a_loop_is_a_run_that_analyze_and_diff_find(tmp_path):
    first = _run(tmp_path, "--iterations", "12", "--envs", "64")
    assert first.returncode == 0, first.stderr
    root = tmp_path / "runs"
    (folder,) = _folders(root)
    assert (root / "latest").resolve() == folder.resolve()
    assert sorted(p.name for p in folder.iterdir()) == ["attribution", "metrics.jsonl", "rank-0.pt.trace.json.gz",
                                                        "run.json"]
    # iteration 6, after the lite window, recorded with stacks: the report's sites come from it
    assert [p.name for p in (folder / "attribution").iterdir()] == ["rank-0.pt.trace.json.gz"]
    # the loop saw the run's folder as PROF_OUTPUT_DIR (absolute: a loop that changes folder still finds it)
    assert f"counted_loop: PROF_OUTPUT_DIR={folder.resolve()}" in first.stdout
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == list(range(12))
    assert all(r["env_steps"] == 64 and r["env_steps_per_s"] == round(64 / r["iteration_s"], 1) for r in rows)
    record = json.loads((folder / "run.json").read_text())
    assert record["profiling"]["iterations_traced"] == [3, 4, 5] and record["exit_code"] == 0
    counted = [r for r in rows if r["iteration"] not in (0, 2, 3, 4, 5, 6)]  # warm-up, the profiler's 2..6
    rate = round(64 * len(counted) / sum(r["iteration_s"] for r in counted), 1)
    assert record["env_steps_per_s"] == pytest.approx(rate, abs=0.2)
    assert error_lines(first.stderr)[-1] == (
        f"run folder: runs/{folder.name} (run.json) | 1 rank trace of iterations 3-5 (lite) | 12 iterations "
        f"in metrics.jsonl, {rate:,.1f} env-steps/s untraced")
    second = _run(tmp_path, "--iterations", "12", "--envs", "64")
    assert second.returncode == 0, second.stderr
    assert len(_folders(root)) == 2  # the first run is kept
    env = clean_env(**ENV, PROF_OUTPUT_DIR=str(root), COLUMNS="120")
    analyzed = run_cmd(["-m", "goodhart_prof.cli", "analyze", "--json"], env=env, cwd=tmp_path)
    assert analyzed.returncode == 0, analyzed.stderr
    document = json.loads(analyzed.stdout)
    assert document["iterations"]["count"] == 3
    assert (document["sites_from"]["iterations"], document["sites_from"]["timed_iterations"]) == ([6], [3, 4, 5])
    diffed = run_cmd(["-m", "goodhart_prof.cli", "diff"], env=env, cwd=tmp_path)
    assert diffed.returncode == 0, diffed.stderr
    assert "A: 3 iterations, env-steps/s from 5 untraced iterations" in " ".join(diffed.stdout.split())
    assert "Machine speed:" in diffed.stdout  # judged from the hooks' own iteration times


def test_a_failing_command_is_recorded_and_not_latest(tmp_path):
    done = _run(tmp_path, "--iterations", "10", "--fail-at", "8")
    assert done.returncode == 3
    (folder,) = _folders(tmp_path / "runs")
    record = json.loads((folder / "run.json").read_text())
    assert record["failed_ranks"] == [{"rank": 0, "exit_code": 3}] and record["iterations_run"] == 8
    assert record["profiling"]["iterations_traced"] == [3, 4, 5]  # the finished window's trace is kept
    assert not (tmp_path / "runs" / "latest").exists()
    assert error_lines(done.stderr)[-1].endswith("| the command exited with code 3")


def test_a_signal_reaches_the_command_once_and_is_recorded(tmp_path):
    gate = tmp_path / "go"
    proc = subprocess.Popen([sys.executable, "-m", "goodhart_prof.cli", "run", "--iterations", "3-5",
                             "--output-dir", "runs", "--", sys.executable, str(LOOP), "--wait-for", str(gate)],
                            env=clean_env(**ENV), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    root = tmp_path / "runs"
    kids = set()
    try:
        wait_for(lambda: root.is_dir() and any((p / "metrics.jsonl").exists() for p in _folders(root)),
                 proc, "iteration 0")
        kids = descendants(proc.pid)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert still_running(kids) == []  # the command ended with its launcher
    finally:  # a command that outlived its launcher (the signal never reached it) is not left behind
        for pid in kids | (descendants(proc.pid) if proc.poll() is None else set()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    (folder,) = _folders(root)
    record = json.loads((folder / "run.json").read_text())
    assert record["interrupted"] == {"signal": "SIGINT", "at_iteration": None}
    assert record["iterations_run"] == 1 and record["traces"] == {}
    assert leftovers(folder) == [] and not (root / "latest").exists()
    assert error_lines(err)[-1].endswith("| interrupted by SIGINT")


def test_the_trainers_options_and_a_missing_program_are_one_line_errors(tmp_path):
    refused = _run(tmp_path, extra=("--nproc", "2", "--seed", "3"))
    assert refused.returncode == 2
    assert error_lines(refused.stderr) == [
        f"Error: --nproc, --seed: the bundled trainer's options, not used with a command ({sys.executable} ...); "
        "give it to the command itself"]
    missing = run_cmd(["-m", "goodhart_prof.cli", "run", "--output-dir", "runs", "--", "no-such-program-x"],
                      env=clean_env(**ENV), cwd=tmp_path)
    assert missing.returncode == 2
    assert error_lines(missing.stderr) == [
        "Error: no-such-program-x: cannot run the command (No such file or directory)"]
    assert not (tmp_path / "runs").exists()  # the run's folder and the root it made are gone
