"""PROF_ENABLED and GOODHART_HEAP_GUARD spellings; what is checked when profiling is off; the
one-line error a bad value gives through the real entry points; the iterations a profiler slows."""
from __future__ import annotations

import numpy as np
import pytest

from goodhart_prof.capture.settings import ProfSettings, SettingsError, parse_switch, profiler_window
from tests.support.helpers import clean_env, error_lines, run_cmd, write_tiny_config


@pytest.mark.parametrize("text", ["1", "true", "TRUE", " Yes ", "on", "On\n"])
def test_switch_on_spellings(text):
    assert parse_switch("PROF_ENABLED", text) is True
    assert ProfSettings.from_env({"PROF_ENABLED": text}).enabled is True


@pytest.mark.parametrize("text", ["0", "false", "No", " OFF ", "", "  ", None])
def test_switch_off_spellings_and_unset(text):
    env = {} if text is None else {"PROF_ENABLED": text}
    assert parse_switch("PROF_ENABLED", text) is False
    assert ProfSettings.from_env(env).enabled is False


@pytest.mark.parametrize("text", ["maybe", "2", "ture", "enabled", "1.0", "y"])
def test_switch_rejects_anything_else_naming_variable_and_value(text):
    with pytest.raises(SettingsError) as err:
        ProfSettings.from_env({"PROF_ENABLED": text})
    message = str(err.value)
    assert "PROF_ENABLED" in message and repr(text) in message and "\n" not in message


def test_off_reads_nothing_else():
    """A stale or broken window setting must not stop a run that does not profile."""
    off = ProfSettings.from_env({"PROF_ENABLED": "off", "PROF_ITERATIONS": "abc",
                                 "PROF_MODE": "heavy", "GOODHART_HEAP_GUARD": "maybe"})
    assert off == ProfSettings()


def test_on_checks_the_window_naming_the_variable():
    with pytest.raises(SettingsError, match=r"PROF_ITERATIONS: .*'abc'"):
        ProfSettings.from_env({"PROF_ENABLED": "yes", "PROF_ITERATIONS": "abc"})
    with pytest.raises(SettingsError, match=r"PROF_MODE .*'Heavy'"):
        ProfSettings.from_env({"PROF_ENABLED": "yes", "PROF_MODE": "Heavy"})


def test_heap_guard_is_off_unless_asked():
    assert ProfSettings.from_env({"PROF_ENABLED": "1"}).heap_guard is False
    assert ProfSettings.from_env({"PROF_ENABLED": "1", "GOODHART_HEAP_GUARD": "on"}).heap_guard is True
    with pytest.raises(SettingsError, match=r"GOODHART_HEAP_GUARD .*'sometimes'"):
        ProfSettings.from_env({"PROF_ENABLED": "1", "GOODHART_HEAP_GUARD": "sometimes"})


def test_trainer_bad_prof_enabled_is_one_line_error(tmp_path):
    res = run_cmd(["-m", "trainer", "--total-iterations", "2", "--device", "cpu", "--no-progress",
                   "--config", str(write_tiny_config(tmp_path)), "--output-dir",
                   str(tmp_path / "never")], env=clean_env(PROF_ENABLED="maybe"))
    assert res.returncode == 2, res.stderr
    assert error_lines(res.stderr) == ["Error: PROF_ENABLED must be one of 1/true/yes/on or "
                                       "0/false/no/off, not 'maybe'"]
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "never").exists()


def test_run_bad_heap_guard_is_one_line_error(tmp_path):
    """`goodhart-prof run` sets PROF_ENABLED itself; the trainer it starts reads the guard."""
    res = run_cmd(["-m", "goodhart_prof.cli", "run", "--iterations", "1", "--device", "cpu",
                   "--no-progress", "--config", str(write_tiny_config(tmp_path)), "--output-dir",
                   str(tmp_path / "never")], env=clean_env(GOODHART_HEAP_GUARD="sometimes"))
    assert res.returncode == 2, res.stderr
    lines = error_lines(res.stderr)
    assert len(lines) == 1 and "GOODHART_HEAP_GUARD" in lines[0] and "'sometimes'" in lines[0]
    assert "Traceback" not in res.stderr


def test_the_profiled_window_is_warm_up_traced_and_the_writing_iteration():
    # window 50-55: 49 sets the profiler up, 56 writes the trace; 48 and 57 run untouched
    assert [i for i in range(45, 60) if profiler_window(i, 50, 55)] == list(range(49, 57))
    its = np.arange(45, 60)
    assert its[profiler_window(its, 50, 55)].tolist() == list(range(49, 57))
    on = ProfSettings.from_env({"PROF_ENABLED": "1", "PROF_ITERATIONS": "0-2"})
    assert [i for i in range(6) if on.profiler_slows(i)] == [0, 1, 2, 3]  # no warm-up before 0
    assert not any(ProfSettings().profiler_slows(i) for i in range(60))  # profiling off


def test_counters_by_name_by_default_or_none():
    from goodhart_prof.capture.settings import DEFAULT_COUNTERS
    on = {"PROF_ENABLED": "1"}
    assert ProfSettings.from_env(on).counters == ()
    assert ProfSettings.from_env({**on, "PROF_COUNTERS": " "}).counters == ()
    named = ProfSettings.from_env({**on, "PROF_COUNTERS": "dram__bytes_read.sum, sm__cycles_elapsed.avg,dram__bytes_read.sum"})
    assert named.counters == ("dram__bytes_read.sum", "sm__cycles_elapsed.avg")  # once each, in order
    default = ProfSettings.from_env({**on, "PROF_COUNTERS": "Default"}).counters
    assert default == DEFAULT_COUNTERS and len(default) == 8
    assert "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum" in default  # what cupti.py counts as FLOPs
    with pytest.raises(SettingsError, match=r"^PROF_COUNTERS: 'dram bytes' is not a CUPTI metric name"):
        ProfSettings.from_env({**on, "PROF_COUNTERS": "dram bytes"})
    with pytest.raises(SettingsError, match="PROF_COUNTERS: '' is not"):
        ProfSettings.from_env({**on, "PROF_COUNTERS": "a,,b"})


def test_trainer_bad_prof_counters_is_one_line_error(tmp_path):
    res = run_cmd(["-m", "trainer", "--total-iterations", "2", "--device", "cpu", "--no-progress",
                   "--config", str(write_tiny_config(tmp_path)), "--output-dir",
                   str(tmp_path / "never")], env=clean_env(PROF_ENABLED="1", PROF_COUNTERS="dram;x"))
    assert res.returncode == 2, res.stderr
    assert error_lines(res.stderr) == ["Error: PROF_COUNTERS: 'dram;x' is not a CUPTI metric name (letters, "
                                       "digits, _ and . only; names separated by commas, or `default`)"]
    assert not (tmp_path / "never").exists()
