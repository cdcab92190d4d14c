"""Profiler hooks: settings, the off path, the traced window, lite vs full, atomic writes."""
from __future__ import annotations

import gzip
import json

import pytest
import torch

from goodhart_prof.fileio import atomic_path
from goodhart_prof.hooks import (PHASES, NoHooks, ProfilerHooks, ProfSettings, SettingsError,
                                 make_hooks, merge_rank_traces, parse_iterations)
from helpers import read_trace, step_labels


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
    assert ProfSettings.from_env({"PROF_ENABLED": "true"}).enabled is True  # tests/test_settings_env.py
    assert on.traced(3) and on.traced(4) and not on.traced(5) and not off.traced(52)
    with pytest.raises(SettingsError):
        ProfSettings.from_env({"PROF_MODE": "heavy"})


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


def test_lite_has_no_shapes_or_stacks_full_has_both(tmp_path):
    lite = read_trace(_traced_loop(ProfSettings(True, 1, 1, "lite", tmp_path / "lite"), range(3)))
    full = read_trace(_traced_loop(ProfSettings(True, 1, 1, "full", tmp_path / "full"), range(3)))

    def has_shapes(doc):
        return any("Input Dims" in e.get("args", {}) for e in doc["traceEvents"])

    def has_stacks(doc):
        return any(e.get("cat") == "python_function" for e in doc["traceEvents"])

    assert not has_shapes(lite) and not has_stacks(lite)
    assert has_shapes(full) and has_stacks(full)


def test_exception_in_window_writes_no_trace(tmp_path):
    hooks = ProfilerHooks(ProfSettings(True, 1, 3, "lite", tmp_path), rank=0)
    with pytest.raises(KeyboardInterrupt):
        for it in range(5):
            with hooks.iteration(it):
                if it == 2:
                    raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []  # neither the trace nor a temporary file


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


def _kineto_like(pid: int, base_ns: int, ts: float, rank: int) -> dict:
    return {
        "baseTimeNanoseconds": base_ns,
        "distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"},
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": pid, "ts": ts, "dur": 5.0},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": ts + 2, "dur": 3.0,
             "args": {"device": 0, "stream": 7, "correlation": 11}},
        ],
    }


def test_merge_ranks_one_process_each_and_aligned_time(tmp_path):
    files = {}
    for rank, (pid, base) in enumerate(((4242, 1_000_000_000), (4343, 1_000_002_000))):
        files[rank] = tmp_path / f"rank-{rank}.pt.trace.json.gz"
        with gzip.open(files[rank], "wt") as fh:
            json.dump(_kineto_like(pid, base, 100.0, rank), fh)
    merge_rank_traces(files, tmp_path / "merged_trace.json")
    merged = json.loads((tmp_path / "merged_trace.json").read_text())
    names = {e["pid"]: e["args"]["name"] for e in merged["traceEvents"] if e.get("name") == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    ops = {e["pid"]: e for e in merged["traceEvents"] if e.get("name") == "aten::mm"}
    kernels = {e["pid"]: e for e in merged["traceEvents"] if e.get("name") == "gemm"}
    # Rank 1's clock base is 2 us later: its events move 2 us later on the common base.
    assert merged["baseTimeNanoseconds"] == 1_000_000_000
    assert ops[0]["ts"] == 100.0 and ops[1]["ts"] == 102.0
    # GPU streams become their own threads of the rank's process, device kept in args.
    assert kernels[1]["tid"] == 1_000_000_000 + 7 and kernels[1]["args"]["device"] == 0
    assert merged["goodhartProf"]["distributedInfo"]["1"]["rank"] == 1
