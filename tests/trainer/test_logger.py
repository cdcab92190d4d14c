"""trainer/logger.py: `AsyncLogger` writes one metrics row per submitted iteration from its own
thread: the values by name (NaN as null), the Goodhart gap, env-steps/s from the iteration's time;
rows appended to metrics.jsonl; the throughput over the iterations not excluded (all of them
when every one is); an unwritable metrics file is a one-line WriteError."""
from __future__ import annotations

import json

import pytest
import torch

from goodhart_prof.fileio import WriteError
from trainer.logger import AsyncLogger

NAMES = ["proxy_return", "true_return", "loss"]
CPU = torch.device("cpu")


def test_rows_by_name_with_the_gap_written_in_order(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": -1}\n')  # rows are appended
    log = AsyncLogger(NAMES, path, CPU, progress=False)
    log.submit(0, 100, torch.tensor([2.5, 1.0, 0.1234567891]))
    log.submit(1, 100, torch.tensor([float("nan"), 0.5, 0.25]))  # no whole episode ended
    log.close()
    rows = log.rows
    assert [r["iteration"] for r in rows] == [0, 1] and [r["env_steps"] for r in rows] == [100, 100]
    assert (rows[0]["proxy_return"], rows[0]["true_return"], rows[0]["loss"]) == (2.5, 1.0, 0.123457)
    assert rows[0]["goodhart_gap"] == 1.5
    assert rows[1]["proxy_return"] is None and rows[1]["goodhart_gap"] is None
    for row in rows:  # the rate is the steps over the time (both rounded)
        assert row["iteration_s"] > 0 and 100 / row["env_steps_per_s"] == pytest.approx(row["iteration_s"], abs=2e-6)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [{"iteration": -1}] + rows


def test_throughput_leaves_out_the_excluded_iterations(tmp_path):
    log = AsyncLogger(["loss"], None, CPU, progress=False, exclude_from_rate=frozenset({1}))
    for i, steps in enumerate((10, 1000, 30)):
        log.submit(i, steps, torch.tensor([0.0]))
    log.close()
    assert (log.timed_steps, log.all_steps) == (40, 1040)
    timed = log.rows[0]["iteration_s"] + log.rows[2]["iteration_s"]
    assert log.timed_seconds == pytest.approx(timed, abs=1e-5)
    assert log.all_seconds == pytest.approx(timed + log.rows[1]["iteration_s"], abs=1e-5)
    assert log.env_steps_per_s == pytest.approx(40 / log.timed_seconds)
    every = AsyncLogger(["loss"], None, CPU, progress=False, exclude_from_rate=frozenset({0}))
    every.submit(0, 50, torch.tensor([0.0]))
    every.close()
    assert every.timed_steps == 0 and every.env_steps_per_s == pytest.approx(50 / every.all_seconds)


def test_no_iteration_no_throughput():
    log = AsyncLogger(["loss"], None, CPU, progress=False)
    log.close()
    assert log.rows == [] and log.env_steps_per_s is None


def test_an_unwritable_metrics_file_is_one_line(tmp_path):
    with pytest.raises(WriteError) as info:
        AsyncLogger(["loss"], tmp_path / "gone" / "metrics.jsonl", CPU, progress=False)
    assert str(info.value) == f"{tmp_path / 'gone' / 'metrics.jsonl'}: cannot write: No such file or directory"
