"""The hooks' own metrics.jsonl rows (capture/iteration_log.py) and their use by the hooks."""
from __future__ import annotations

import json
import math

import pytest

from goodhart_prof.capture.hooks import NoHooks, ProfSettings, make_hooks
from goodhart_prof.capture.iteration_log import METRICS_FILE, IterationLog, check_env_steps


def _rows(folder):
    return [json.loads(line) for line in (folder / METRICS_FILE).read_text().splitlines()]


def test_a_row_per_iteration_with_its_rate(tmp_path):
    log = IterationLog(tmp_path)
    log.add(4, 0.25, 1000)
    log.add(5, 0.5, None)
    log.close()
    assert _rows(tmp_path) == [
        {"iteration": 4, "iteration_s": 0.25, "env_steps": 1000, "env_steps_per_s": 4000.0},
        {"iteration": 5, "iteration_s": 0.5, "env_steps": None, "env_steps_per_s": None}]
    IterationLog(tmp_path).add(6, 0.125, 2)  # a second writer appends
    assert [r["iteration"] for r in _rows(tmp_path)] == [4, 5, 6]


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "64", True])
def test_env_steps_must_be_a_count(bad):
    with pytest.raises(ValueError, match=r"env_steps=\.\.\.\) must be a number of env steps >= 0"):
        check_env_steps(bad)
    assert check_env_steps(0) == 0 and check_env_steps(12.5) == 12.5 and check_env_steps(None) is None


def test_a_failed_write_is_said_once_and_training_goes_on(tmp_path, capsys):
    (tmp_path / METRICS_FILE).mkdir()  # cannot be opened as a file
    log = IterationLog(tmp_path)
    log.add(0, 0.1, 1)
    log.add(1, 0.1, 1)
    err = capsys.readouterr().err.splitlines()
    assert err == [f"goodhart-prof: {tmp_path / METRICS_FILE}: cannot write (Is a directory); "
                   "per-iteration times are no longer logged"]


def _loop(hooks, n, env_steps=None):
    import torch
    for it in range(n):
        with hooks.iteration(it, env_steps=env_steps):
            torch.ones(4).sum()
    hooks.close()


def test_the_hooks_log_every_iteration_only_when_asked(tmp_path):
    asked = ProfSettings(enabled=True, first=2, last=3, output_dir=tmp_path / "a", metrics=True)
    _loop(make_hooks(asked, rank=0, device_type="cpu"), 6, env_steps=32)
    rows = _rows(tmp_path / "a")
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3, 4, 5]
    assert all(r["env_steps"] == 32 and r["iteration_s"] > 0 for r in rows)
    assert all(r["env_steps_per_s"] == round(32 / r["iteration_s"], 1) for r in rows)
    assert (tmp_path / "a" / "rank-0.pt.trace.json.gz").is_file()
    # not asked (the trainer, a plain PROF_ENABLED loop), another rank, profiling off: no file
    _loop(make_hooks(ProfSettings(enabled=True, first=1, last=1, output_dir=tmp_path / "b"), 0, "cpu"), 3)
    _loop(make_hooks(ProfSettings(enabled=True, first=1, last=1, output_dir=tmp_path / "c", metrics=True),
                     1, "cpu"), 3)
    off = make_hooks(ProfSettings(enabled=False, output_dir=tmp_path / "d", metrics=True))
    assert isinstance(off, NoHooks)
    _loop(off, 2, env_steps=4)
    assert not (tmp_path / "b" / METRICS_FILE).exists() and not (tmp_path / "c" / METRICS_FILE).exists()
    assert not (tmp_path / "d").exists()


def test_prof_metrics_is_read_with_the_other_variables():
    on = ProfSettings.from_env({"PROF_ENABLED": "1", "PROF_METRICS": "yes"})
    assert on.metrics is True
    assert ProfSettings.from_env({"PROF_ENABLED": "1"}).metrics is False
    with pytest.raises(ValueError, match="PROF_METRICS must be one of"):
        ProfSettings.from_env({"PROF_ENABLED": "1", "PROF_METRICS": "maybe"})


def test_read_rows_keeps_whole_rows_in_file_order(tmp_path):
    from goodhart_prof.capture.iteration_log import read_rows

    assert read_rows(tmp_path) == []  # no file
    (tmp_path / METRICS_FILE).write_bytes(b'{"iteration": 2, "iteration_s": 0.5}\nnot json\n[1]\n'
                                          b'{"iteration": true}\n{"iteration": 0}\n{"iteration": 3, "it')
    assert read_rows(tmp_path) == [{"iteration": 2, "iteration_s": 0.5}, {"iteration": 0}]
