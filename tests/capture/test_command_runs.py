"""A user's command as a run (capture/command_runs.py): its environment, its run.json, its line."""
from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

from goodhart_prof.capture.command_runs import (command_environment, ended_by, rank_traces,
                                                record_command_run, summary, trainer_only, untraced_rate)
from goodhart_prof.trace.run_folders import run_in
from goodhart_prof.trace.run_record import read_run
from tests.support.paths import DATA

TRACE = DATA / "ours" / "ab" / "clean_1" / "rank-0.pt.trace.json.gz"  # iterations 10-15


def test_the_environment_turns_profiling_on_into_the_folder(tmp_path):
    env = command_environment((3, 5), None, tmp_path / "run", {"PROF_ENABLED": "0", "PROF_MODE": "full",
                                                              "HOME": "/h"})
    assert {k: env[k] for k in ("PROF_ENABLED", "PROF_ITERATIONS", "PROF_MODE", "PROF_METRICS")} == \
        {"PROF_ENABLED": "1", "PROF_ITERATIONS": "3-5", "PROF_MODE": "full", "PROF_METRICS": "1"}
    assert env["PROF_OUTPUT_DIR"] == str((tmp_path / "run").absolute()) and env["HOME"] == "/h"
    assert env["KINETO_LOG_LEVEL"] == "6"
    assert command_environment((0, 0), "lite", tmp_path, {}, verbose=True)["KINETO_LOG_LEVEL"] == "4"
    assert command_environment((0, 0), "lite", tmp_path, {"KINETO_LOG_LEVEL": "2"})["KINETO_LOG_LEVEL"] == "2"
    assert command_environment((0, 0), "lite", tmp_path, {"PROF_MODE": "full"})["PROF_MODE"] == "lite"


def test_the_trainers_options_are_named_when_given_with_a_command():
    values = {"total_iterations": None, "output_dir": "x", "nproc": 1, "config_file": None, "device": None,
              "seed": None, "checkpoint_every": None, "inject": None, "resume": False, "no_progress": False,
              "cudagraphs": False}
    assert trainer_only(values) == []
    assert trainer_only({**values, "nproc": 2, "resume": True, "seed": 0}) == ["--nproc", "--seed", "--resume"]


def _rows(n, env_steps=100, seconds=0.5):
    rate = None if env_steps is None else env_steps / seconds
    return [{"iteration": i, "iteration_s": seconds, "env_steps": env_steps, "env_steps_per_s": rate}
            for i in range(n)]


def test_the_untraced_rate_leaves_out_the_first_iteration_and_the_window():
    rows = _rows(10)
    rows[0]["iteration_s"] = 9.0  # warm-up: not counted
    rows[4]["iteration_s"] = 5.0  # 3 (warm-up of the profiler) .. 6 (writes the trace): not counted
    # counted: 1, 2, 7, 8, 9 -> 500 steps in 2.5 s
    assert untraced_rate(rows, (4, 5)) == 200.0
    assert untraced_rate(_rows(10, env_steps=None), (4, 5)) is None  # no env steps reported
    assert untraced_rate(_rows(5), (0, 9)) is None                     # every iteration was profiled


def test_the_exit_code_says_how_it_ended():
    assert ended_by(130) == {"signal": "SIGINT", "at_iteration": None}
    assert ended_by(143)["signal"] == "SIGTERM" and ended_by(129)["signal"] == "SIGHUP"
    assert ended_by(0) is None and ended_by(1) is None and ended_by(128 + signal.SIGKILL) is None


def _folder(tmp_path, rows):
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(TRACE, folder / "rank-0.pt.trace.json.gz")
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"iteration": 20, "it')
    return folder


def test_run_json_of_a_finished_command_is_a_complete_run(tmp_path):
    folder = _folder(tmp_path, _rows(20))
    record = record_command_run(folder, ["python", "loop.py"], 0, (10, 15), "lite", 0.0)
    assert record["profiling"] == {"enabled": True, "mode": "lite", "iterations": [10, 15],
                                   "iterations_traced": [10, 11, 12, 13, 14, 15], "trace_dir": str(folder)}
    assert record["iterations_run"] == 20 and record["env_steps_per_s"] == 200.0  # the torn line skipped
    assert record["traces"] == {"0": str(folder / "rank-0.pt.trace.json.gz")} and record["merged_trace"] is None
    assert record["kind"] == "command" and record["exit_code"] == 0 and record["world_size"] == 1
    assert json.loads((folder / "run.json").read_text()) == record
    assert run_in(folder).complete
    run = read_run(folder)  # the reading side takes it as a run: window, per-iteration samples
    assert run.window == (10, 15) and run.mode == "lite"
    assert list(run.throughput()["iteration"]) == list(range(1, 9))  # 3 or more before the window
    assert summary(record, folder) == (f"run folder: {folder} (run.json) | 1 rank trace of iterations "
                                       "10-15 (lite) | 20 iterations in metrics.jsonl, 200.0 env-steps/s untraced")


def test_a_failed_or_stopped_command_is_not_a_complete_run(tmp_path):
    folder = _folder(tmp_path, _rows(20))
    failed = record_command_run(folder, ["python", "loop.py"], 3, (10, 15), "lite", 0.0)
    assert failed["failed_ranks"] == [{"rank": 0, "exit_code": 3}] and failed["interrupted"] is None
    assert not run_in(folder).complete
    assert summary(failed, folder).endswith("| the command exited with code 3")
    stopped = record_command_run(folder, ["python", "loop.py"], 130, (10, 15), "lite", 0.0)
    assert stopped["interrupted"] == {"signal": "SIGINT", "at_iteration": None} and stopped["failed_ranks"] == []
    assert not run_in(folder).complete


def test_a_command_that_never_reached_the_window_or_the_hooks_says_so(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(4)))
    short = record_command_run(folder, ["python", "loop.py"], 0, (50, 55), "lite", 0.0)
    assert short["profiling"]["iterations_traced"] == [] and not run_in(folder).complete
    assert "no trace: the command ran 4 iterations of hooks.iteration, the window is 50-55 (set --iterations)" \
        in summary(short, folder)
    (folder / "metrics.jsonl").unlink()
    bare = record_command_run(folder, ["python", "loop.py"], 0, (50, 55), "lite", 0.0)
    assert "does the command call goodhart_prof.capture.hooks" in summary(bare, folder)


def test_several_rank_traces_are_merged(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    for rank in (0, 1):
        shutil.copy(TRACE, folder / f"rank-{rank}.pt.trace.json.gz")
    (folder / "rank-x.pt.trace.json.gz").write_bytes(b"")  # not a rank's
    assert list(rank_traces(folder)) == [0, 1]
    record = record_command_run(folder, ["torchrun", "loop.py"], 0, (10, 15), "lite", 0.0)
    assert record["world_size"] == 2 and record["merged_trace"] == str(folder / "merged_trace.json")
    merged = json.loads(Path(record["merged_trace"]).read_bytes())
    assert merged["goodhartProf"]["merged_ranks"] == [0, 1]
