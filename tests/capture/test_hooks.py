"""Profiler hooks: settings, the off path, the traced window, lite vs full, atomic writes."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import pytest
import torch

from goodhart_prof.fileio import atomic_path
from goodhart_prof.capture.hooks import (PHASES, NoHooks, ProfilerHooks, ProfSettings, SettingsError,
                                 make_hooks, parse_iterations)
from tests.support.helpers import read_trace, step_labels
from tests.support.paths import ROOT


@pytest.mark.parametrize("text,expected", [("50-55", (50, 55)), ("7", (7, 7)), (" 0 - 3 ", (0, 3)),
                                           ("12-12", (12, 12))])
def test_parse_iterations_accepts(text, expected):
    assert parse_iterations(text) == expected


@pytest.mark.parametrize("text", ["55-50", "abc", "-3", "1-x", "", "3-", "1,2", "1.5"])
def test_parse_iterations_rejects(text):
    with pytest.raises(SettingsError):
        parse_iterations(text)


def test_settings_from_env_defaults_and_values(tmp_path):
    off = ProfSettings.from_env({})
    assert (off.enabled, off.first, off.last, off.mode, str(off.output_dir)) == (False, 50, 55, "lite", "traces")
    on = ProfSettings.from_env({"PROF_ENABLED": "1", "PROF_ITERATIONS": "3-4", "PROF_MODE": "full",
                                "PROF_OUTPUT_DIR": str(tmp_path)})
    assert (on.enabled, on.first, on.last, on.mode, on.output_dir) == (True, 3, 4, "full", tmp_path)
    assert ProfSettings.from_env({"PROF_ENABLED": "true"}).enabled is True  # tests/capture/test_settings.py
    assert on.traced(3) and on.traced(4) and not on.traced(5) and not off.traced(52)
    with pytest.raises(SettingsError):
        ProfSettings.from_env({"PROF_ENABLED": "1", "PROF_MODE": "heavy"})  # checked when on


def test_off_means_no_profiler_object_and_shared_noop():
    hooks = make_hooks(ProfSettings(enabled=False))
    assert isinstance(hooks, NoHooks)
    assert hooks.phase("rollout") is hooks.phase("gae") is hooks.iteration(3)
    assert not torch.autograd.profiler._is_profiler_enabled


def _traced_loop(settings, iterations):
    hooks = ProfilerHooks(settings, rank=0)
    x = torch.randn(64, 64)
    for it in iterations:
        with hooks.iteration(it):
            for name in PHASES:
                with hooks.phase(name):
                    x = torch.tanh(x @ x) * 0.5
    hooks.close()
    return hooks.trace_path


def test_window_labels_equal_iterations_and_phases(tmp_path):
    path = _traced_loop(ProfSettings(True, 4, 6, "lite", tmp_path), range(10))
    events = read_trace(path)["traceEvents"]
    assert step_labels(events) == ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]
    annotations = {e["name"] for e in events if e.get("cat") == "user_annotation"}
    assert set(PHASES) <= annotations
    # Phases outside the window are not recorded: each phase appears once per traced iteration.
    rollouts = [e for e in events if e.get("name") == "rollout" and e.get("ph") == "X"]
    assert len(rollouts) == 3


def _loop_seeing_warmups(monkeypatch, settings, iterations, slow_iteration=None, marks=None):
    """Run a traced loop; returns (trace path or None, iterations in which the profiler was
    prepared). Iteration `slow_iteration` sleeps 50 ms and runs aten::relu, which no other does;
    `marks["slow_end_us"]` gets the wall clock (Unix us) at the end of its body."""
    prepared: list[int] = []
    current = [None]
    original = torch.profiler.profile.prepare_trace

    def prepare_trace(prof):
        prepared.append(current[0])
        original(prof)

    monkeypatch.setattr(torch.profiler.profile, "prepare_trace", prepare_trace)
    # the attribution iteration after a lite window prepares a profiler of its own (tested below)
    hooks = ProfilerHooks(dataclasses.replace(settings, sites=False), rank=0)
    x = torch.randn(32, 32)
    for it in iterations:
        current[0] = it
        with hooks.iteration(it):
            with hooks.phase("rollout"):
                x = torch.tanh(x @ x) * 0.5
            if it == slow_iteration:
                time.sleep(0.05)
                x = torch.relu(x)
                if marks is not None:
                    marks["slow_end_us"] = time.time_ns() / 1000
    hooks.close()
    return (hooks.trace_path if hooks.trace_path.is_file() else None), prepared


def test_warmup_iteration_is_recorded_nowhere(tmp_path, monkeypatch):
    marks: dict = {}
    path, prepared = _loop_seeing_warmups(monkeypatch, ProfSettings(True, 4, 6, "lite", tmp_path),
                                          range(9), slow_iteration=3, marks=marks)
    assert prepared == [3]  # the profiler was set up during the iteration before the window
    doc = read_trace(path)
    events = doc["traceEvents"]
    assert step_labels(events) == ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]
    start = min(e["ts"] for e in events if e.get("name") == "ProfilerStep#4")
    spans = [e for e in events if e.get("ph") == "X"]
    # Only the profiler's own span of the trace (cat "Trace") may open before ProfilerStep#4,
    # and only after the warm-up iteration's body ended (order, not a time limit: a loaded machine
    # only widens the moment between start_trace and the label). Kineto's ts are Unix us less
    # baseTimeNanoseconds; 1 ms of slack for its clock conversion, against the 50 ms sleep a trace
    # started during the warm-up would hold.
    early = [e for e in spans if e["ts"] < start]
    assert [e.get("cat") for e in early] in ([], ["Trace"])
    base_us = doc.get("baseTimeNanoseconds", 0) / 1000
    assert all(e["ts"] + base_us > marks["slow_end_us"] - 1000 for e in early), \
        (marks, [e["ts"] + base_us for e in early])
    assert not [e for e in spans if e["name"] == "aten::relu"]  # the warm-up's own op
    assert len([e for e in spans if e["name"] == "rollout"]) == 3


@pytest.mark.parametrize("first,last,iterations,warmup,labels", [
    (0, 1, range(4), [0], [0, 1]),       # no iteration before 0: cold start in iteration 0
    (4, 6, range(5, 9), [5], [5, 6]),    # resumed inside the window: cold start, labels as ever
    (4, 6, range(4, 9), [4], [4, 5, 6]),  # resumed at first: cold start
    (4, 6, range(3, 9), [3], [4, 5, 6]),  # resumed at first - 1: warm-up as usual
])
def test_window_without_room_for_warmup_starts_cold(tmp_path, monkeypatch, first, last, iterations,
                                                    warmup, labels):
    path, prepared = _loop_seeing_warmups(monkeypatch, ProfSettings(True, first, last, "lite",
                                                                    tmp_path), iterations)
    assert prepared == warmup
    assert step_labels(read_trace(path)["traceEvents"]) == [f"ProfilerStep#{i}" for i in labels]


def test_training_ending_in_the_warmup_writes_nothing(tmp_path, monkeypatch):
    path, prepared = _loop_seeing_warmups(monkeypatch, ProfSettings(True, 4, 6, "lite", tmp_path),
                                          range(4))
    assert prepared == [3] and path is None and list(tmp_path.iterdir()) == []
    assert not torch.autograd.profiler._is_profiler_enabled
    later, _ = _loop_seeing_warmups(monkeypatch, ProfSettings(True, 1, 1, "lite", tmp_path / "b"),
                                    range(3))  # the next profiler works normally
    assert step_labels(read_trace(later)["traceEvents"]) == ["ProfilerStep#1"]


def test_lite_has_no_shapes_or_stacks_full_has_both(tmp_path):
    lite = read_trace(_traced_loop(ProfSettings(True, 1, 1, "lite", tmp_path / "lite"), range(3)))
    full = read_trace(_traced_loop(ProfSettings(True, 1, 1, "full", tmp_path / "full"), range(3)))

    def has_shapes(doc):
        return any("Input Dims" in e.get("args", {}) for e in doc["traceEvents"])

    def has_stacks(doc):
        return any(e.get("cat") == "python_function" for e in doc["traceEvents"])

    assert not has_shapes(lite) and not has_stacks(lite)
    assert has_shapes(full) and has_stacks(full)


@pytest.mark.parametrize("stop_at", [0, 2])  # in the warm-up, in the window
def test_exception_in_window_writes_no_trace(tmp_path, stop_at):
    hooks = ProfilerHooks(ProfSettings(True, 1, 3, "lite", tmp_path), rank=0)
    with pytest.raises(KeyboardInterrupt):
        for it in range(5):
            with hooks.iteration(it):
                if it == stop_at:
                    raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []  # neither the trace nor a temporary file
    assert not torch.autograd.profiler._is_profiler_enabled


def test_atomic_path_keeps_old_file_when_writer_fails(tmp_path):
    target = tmp_path / "run.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]
    with atomic_path(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new"
    assert oct(target.stat().st_mode & 0o777) != oct(0o600)  # usual mode, not mkstemp's


@pytest.mark.parametrize("first,last,expected", [(3, 4, {2, 3, 4, 5}), (0, 1, {0, 1, 2})])
def test_throughput_leaves_out_warmup_traced_and_export_iterations(tmp_path, monkeypatch,
                                                                    first, last, expected):
    """train() hands the logger every iteration a profiler slows: the warm-up (none before
    iteration 0), the traced ones, and the one after the window that writes the trace."""
    from trainer import train as train_module
    from trainer.config import build_config
    from tests.support.helpers import write_tiny_config

    seen = []
    real_logger = train_module.AsyncLogger

    def recording_logger(*args, **kwargs):
        seen.append(set(kwargs["exclude_from_rate"]))
        return real_logger(*args, **kwargs)

    monkeypatch.setattr(train_module, "AsyncLogger", recording_logger)
    cfg = build_config(str(write_tiny_config(tmp_path)), total_iterations=7, device="cpu",
                       output_dir=str(tmp_path / "out"), progress=False, warmup=False)
    result = train_module.train(cfg, ProfSettings(True, first, last, "lite", tmp_path / "out"))
    assert seen == [expected]
    assert step_labels(read_trace(result.trace_path)["traceEvents"]) == \
        [f"ProfilerStep#{i}" for i in range(first, last + 1)]


@pytest.mark.parametrize("asked,gpu,traced", [
    (None, False, "cpu"), ("cuda", False, "cpu"),   # no GPU: the CPU only, no profiler warning
    (None, True, "cuda"), ("cuda", True, "cuda"), ("cpu", True, "cpu"),
])
def test_the_device_traced_follows_what_torch_sees(tmp_path, monkeypatch, asked, gpu, traced):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    hooks = make_hooks(ProfSettings(True, 4, 6, "lite", tmp_path), device_type=asked)
    assert hooks.device_type == traced


KINETO_LOOP = """
import sys
from goodhart_prof.capture.hooks import ProfSettings, make_hooks
import torch
hooks = make_hooks(ProfSettings(True, 1, 1, "lite", sys.argv[1]), rank=0)
for it in range(3):
    with hooks.iteration(it):
        torch.randn(64).sum()
hooks.close()
"""


@pytest.mark.parametrize("level,quiet", [(None, True), ("5", False)])
def test_kinetos_own_lines_are_quiet_unless_asked_for(tmp_path, level, quiet):
    """Kineto prints `USDT ... profiler_start` into the user's loop; the hooks quiet it the way
    `goodhart-prof run` does, and a KINETO_LOG_LEVEL the user set (5: its usdt lines) wins."""
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL" and not k.startswith("PROF_")}
    if level is not None:
        env["KINETO_LOG_LEVEL"] = level
    done = subprocess.run([sys.executable, "-c", KINETO_LOOP, str(tmp_path)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert step_labels(read_trace(tmp_path / "rank-0.pt.trace.json.gz")["traceEvents"]) == ["ProfilerStep#1"]
    assert ("profiler_start" not in done.stderr + done.stdout) == quiet, done.stderr[-2000:]


def _has_stacks(doc):
    return any(e.get("cat") == "python_function" for e in doc["traceEvents"])


def test_after_a_lite_window_one_iteration_is_recorded_with_stacks_for_the_sites(tmp_path):
    path = _traced_loop(ProfSettings(True, 2, 3, "lite", tmp_path), range(6))
    window, sites = read_trace(path), read_trace(tmp_path / "attribution" / path.name)
    assert step_labels(window["traceEvents"]) == ["ProfilerStep#2", "ProfilerStep#3"]
    assert not _has_stacks(window)  # the window's timings are lite
    assert step_labels(sites["traceEvents"]) == ["ProfilerStep#4"] and _has_stacks(sites)
    phases = {e["name"] for e in sites["traceEvents"] if e.get("cat") == "user_annotation"}
    assert set(PHASES) <= phases  # the same chains as in the window
    assert not any("Input Dims" in e.get("args", {}) for e in sites["traceEvents"])  # stacks only
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [path.name, path.name]


@pytest.mark.parametrize("settings,iterations", [
    (ProfSettings(True, 2, 3, "full"), range(6)),                 # full mode has stacks already
    (ProfSettings(True, 2, 3, "lite", sites=False), range(6)),    # PROF_SITES=0
    (ProfSettings(True, 2, 3, "lite"), range(4)),                 # training ends with the window
], ids=["full", "PROF_SITES-off", "no-iteration-after"])
def test_no_attribution_iteration_when_there_is_no_need_or_no_room(tmp_path, settings, iterations):
    path = _traced_loop(dataclasses.replace(settings, output_dir=tmp_path), iterations)
    assert path.is_file() and not (tmp_path / "attribution").exists()


def test_an_interrupted_attribution_iteration_writes_no_attribution(tmp_path):
    hooks = ProfilerHooks(ProfSettings(True, 1, 1, "lite", tmp_path), rank=0)
    with pytest.raises(KeyboardInterrupt):
        for it in range(4):
            with hooks.iteration(it):
                torch.ones(3).sum()
                if it == 2:
                    raise KeyboardInterrupt
    hooks.abort()
    assert [p.name for p in tmp_path.iterdir()] == [hooks.trace_path.name]  # the window's, whole
    assert not torch.autograd.profiler._is_profiler_enabled


def test_prof_sites_is_read_with_the_other_variables():
    assert ProfSettings.from_env({"PROF_ENABLED": "1"}).sites is True
    assert ProfSettings.from_env({"PROF_ENABLED": "1", "PROF_SITES": "0"}).sites is False


def test_experimental_options_sync_events_in_full_mode_and_counters_per_kernel_on_cuda():
    from goodhart_prof.capture.hooks import experimental_options
    assert experimental_options(False, "cuda", ()) == {}
    assert experimental_options(True, "cuda", ()) == {"enable_cuda_sync_events": True}
    assert experimental_options(False, "cuda", ("dram__bytes_read.sum",)) == {
        "profiler_metrics": ["dram__bytes_read.sum"], "profiler_measure_per_kernel": True}
    # torch takes them all at once (the config object is built on any build, CUDA or not)
    torch.profiler._ExperimentalConfig(**experimental_options(True, "cuda", ("dram__bytes_read.sum",)))
    assert experimental_options(True, "cpu", ()) == {}
    with pytest.warns(UserWarning, match="PROF_COUNTERS is ignored: the loop does not run on a CUDA device"):
        assert experimental_options(True, "cpu", ("dram__bytes_read.sum",)) == {}
