"""goodhart_prof/trace/run_record.py: a run folder's own record. Which folder a path belongs to, what
run.json says (the traced window, world size, whole-run rate, mode and device), metrics.jsonl read
robustly (a torn last line, lines that are not rows, iterations out of range: skipped with a
warning naming the line), and which iterations are throughput samples or traced."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from goodhart_prof.trace.run_record import read_run, run_folder
from goodhart_prof.trace.run_json import RunJsonError
from tests.support.paths import DATA

RUN = DATA / "ours" / "ab" / "clean_1"


def _run_copy(tmp_path: Path, name: str = "run") -> Path:
    folder = tmp_path / name
    shutil.copytree(RUN, folder)
    return folder


def _write_run(folder: Path, record: dict, rows: list[dict]) -> None:
    (folder / "run.json").write_text(json.dumps(record))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_run_folder_of_a_path(tmp_path):
    (tmp_path / "run.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    assert run_folder(tmp_path) == tmp_path and run_folder(tmp_path / "rank-0.json") == tmp_path
    assert run_folder(tmp_path / "sub") is None and read_run(tmp_path / "sub") is None


def test_what_run_json_says(tmp_path):
    _write_run(tmp_path, {"world_size": 4, "env_steps_per_s": 1234.5, "device": " NVIDIA H200 ",
                          "profiling": {"enabled": True, "iterations": [5, 7], "mode": "lite"}}, [])
    run = read_run(tmp_path)
    assert (run.folder, run.world_size, run.window, run.env_steps_per_s) == (tmp_path, 4, (5, 7), 1234.5)
    assert (run.mode, run.device, run.first_iteration, run.warmup) == ("lite", "NVIDIA H200", None, [])
    assert len(run.metrics) == 0 and run.warnings == []
    _write_run(tmp_path, {"profiling": {"enabled": False, "iterations": [5, 7]}}, [])
    run = read_run(tmp_path)  # profiling off: no window; no world size: one rank
    assert (run.window, run.world_size, run.env_steps_per_s, run.mode, run.device) == (None, 1, None, None, None)


def test_a_run_json_that_is_not_json_is_a_one_line_error(tmp_path):
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(RunJsonError) as info:  # the one-line user error, not a raw JSON or OS error
        read_run(tmp_path)
    assert info.type is RunJsonError
    said = f"{tmp_path / 'run.json'}: not a readable run.json (not JSON: "
    assert str(info.value).startswith(said) and "\n" not in str(info.value)


def test_metrics_rows_sorted_with_the_last_of_a_repeated_iteration_kept(tmp_path):
    rows = [{"iteration": 2, "env_steps": 10, "iteration_s": 0.5, "env_steps_per_s": 20.0},
            {"iteration": 1, "env_steps": "ten", "iteration_s": True, "env_steps_per_s": 1e400},
            {"iteration": 2, "env_steps": 11, "iteration_s": 0.25, "env_steps_per_s": 44.0}]
    _write_run(tmp_path, {}, rows)
    m = read_run(tmp_path).metrics
    assert m["iteration"].tolist() == [1, 2] and m["env_steps"].tolist()[1:] == [11.0]
    assert m[["env_steps", "iteration_s", "env_steps_per_s"]].iloc[0].isna().all()  # not finite numbers
    assert m["iteration_s"].tolist()[1:] == [0.25] and m["iteration"].dtype == np.int64


def test_profiled_and_traced_iterations(tmp_path):
    rows = [{"iteration": i, "env_steps": 100, "iteration_s": 0.1 * (i + 1), "env_steps_per_s": 1.0}
            for i in range(10)]
    _write_run(tmp_path, {"profiling": {"enabled": True, "iterations": [0, 3]}}, rows)
    run = read_run(tmp_path)
    # the profiler's warm-up before FIRST, FIRST..LAST, and LAST + 1 (it writes the trace)
    assert run.profiled(np.arange(7)).tolist() == [True] * 5 + [False] * 2
    assert run.traced_seconds() == pytest.approx([0.2, 0.3, 0.4])  # iteration 0 is the warm-up
    _write_run(tmp_path, {}, rows)
    run = read_run(tmp_path)
    assert not run.profiled(np.arange(10)).any() and len(run.traced_seconds()) == 0
    assert run.throughput()["iteration"].tolist() == list(range(1, 10))  # all but the warm-up


def test_throughput_iterations_of_a_run(tmp_path):
    def write(window, total):
        (tmp_path / "run.json").write_text(json.dumps(
            {"world_size": 2, "env_steps_per_s": 1.0, "profiling": {"enabled": True, "iterations": window}}))
        rows = [{"iteration": i, "env_steps": 100, "iteration_s": 0.1, "env_steps_per_s": 1000.0 + i}
                for i in range(total)]
        (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"torn')
        return read_run(tmp_path / "rank-0.pt.trace.json.gz")  # a file inside the folder
    run = write([10, 15], 17)
    t = run.throughput()
    # 0 warm-up, 9 the profiler's warm-up, 10-15 traced, 16 writes the trace: 1-8 before the window
    assert t["iteration"].tolist() == list(range(1, 9)) and run.warmup == [0]
    assert t["rate"].tolist() == [2 * (1000.0 + i) for i in range(1, 9)]  # both ranks
    t = write([2, 7], 14).throughput()
    assert t["iteration"].tolist() == [9, 10, 11, 12, 13]  # fewer than 3 before the window: after it

def test_a_metrics_line_torn_inside_a_utf8_character_is_skipped_with_a_warning(tmp_path):
    folder = _run_copy(tmp_path)
    whole = read_run(folder)
    with open(folder / "metrics.jsonl", "ab") as fh:
        fh.write('{"iteration": 99, "note": "é'.encode()[:-1])  # the last byte of é cut off
    torn = read_run(folder)
    assert torn.metrics.equals(whole.metrics) and whole.warnings == []
    assert torn.warnings == [f"{folder / 'metrics.jsonl'}: skipped line 17, its last: torn (the "
                             "run was still writing it, or was stopped)"]


def test_an_iteration_out_of_range_is_skipped_with_a_warning_naming_the_line(tmp_path):
    folder = _run_copy(tmp_path)
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    rows[3]["iteration"] = 2**70
    rows[4]["env_steps"] = 10**400 // 10**30  # a number no float holds: not a number, not a crash
    rows[5] = "not a row"
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "\xff\n")
    run = read_run(folder)
    assert run.metrics["iteration"].tolist() == [r["iteration"] for i, r in enumerate(rows)
                                                 if i not in (3, 5)]
    assert run.metrics["env_steps"].isna().tolist() == [i == 4 for i in range(len(rows)) if i not in (3, 5)]
    path = folder / "metrics.jsonl"
    assert run.warnings == [f"{path}: skipped line 4: iteration 1180591620717411303424 is out of "
                            "range (0 to 2**63 - 1)",
                            f"{path}: skipped 2 line(s) that are not metrics rows (lines 6, 17)"]
    assert len(run.throughput()) > 0


def test_untraced_time_samples_of_a_loop_that_reports_no_env_steps(tmp_path):
    """A user's loop under `run -- CMD` may log times only: its untraced iterations are still the
    time samples the machine-speed check reads, and it has no throughput samples."""
    rows = [{"iteration": i, "iteration_s": 0.1 * (i + 1), "env_steps": None, "env_steps_per_s": None}
            for i in range(12)]
    _write_run(tmp_path, {"profiling": {"enabled": True, "iterations": [6, 7]}}, rows)
    run = read_run(tmp_path)
    # 0 is warm-up, 5-8 are profiled (warm-up of the profiler .. the trace's write): 1-4 remain
    assert list(run.untraced()["iteration"]) == [1, 2, 3, 4]
    assert run.untraced()["iteration_s"].tolist() == pytest.approx([0.2, 0.3, 0.4, 0.5])
    assert run.throughput().empty
    rows[3]["iteration_s"] = None  # a row without a time is no sample: 3 before the window remain
    _write_run(tmp_path, {"profiling": {"enabled": True, "iterations": [6, 7]}}, rows)
    assert list(read_run(tmp_path).untraced()["iteration"]) == [1, 2, 4]
