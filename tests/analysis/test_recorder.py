"""The advice to record again with stacks, shapes and memory says what applies to how the trace
was recorded: `goodhart-prof run --mode full` for a run's trace, PROF_MODE=full for our hooks in
the user's own loop, torch.profiler's arguments for any other profiler's trace."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.recorder import record_full_advice, recorded_by
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

V100 = DATA / "hta" / "v100_ddp_rank1.json.gz"          # HTA's sample: no stacks, no memory events
DLRM = DATA / "param" / "dlrm_8rank" / "worker0_step_12.pt.trace.json.gz"
OURS_LITE = DATA / "ours" / "cpu_item_logging_lite.json.gz"  # our trainer, lite mode


def findings(path: Path):
    a = analyze(load(path, progress=False))
    return {f.rule: f for f in a.findings}, {n.rule: n.reason for n in a.not_judged}


def test_other_profilers_get_torch_profiler_arguments():
    for path in (V100, DLRM, DATA / "kineto" / "resnet50_v100_2021.pt.trace.json.gz"):
        assert recorded_by(load(path, progress=False)) == "other", path
    found, _ = findings(V100)
    fix = found["no_python_stacks"].fix
    assert fix.startswith("Profile with torch.profiler.profile(with_stack=True, record_shapes=True, "
                          "profile_memory=True)")
    assert "goodhart-prof" not in fix and "PROF_MODE" not in fix
    _, not_judged = findings(DLRM)  # PARAM's DLRM trace: no memory events
    assert not_judged["allocator_waste"] == ("the trace has no memory events (record with torch.profiler."
                                             "profile(with_stack=True, record_shapes=True, profile_memory=True))")


def test_our_trainer_gets_goodhart_prof_run():
    found, not_judged = findings(OURS_LITE)
    assert recorded_by(load(OURS_LITE, progress=False)) == "run"  # the trainer's phases
    assert found["no_python_stacks"].fix.startswith("Record again with goodhart-prof run --mode full:")
    assert found["no_python_stacks"].evidence["recorded_by"] == "goodhart-prof run (lite mode)"
    assert "goodhart-prof run --mode full" in not_judged["allocator_waste"]


@pytest.mark.parametrize("name, beside, expected", [
    ("rank-1.pt.trace.json.gz", None, "hooks"),            # as our hooks name it, no run folder
    ("rank-1.pt.trace.json.gz", "run.json", "run"),        # in a goodhart-prof run folder
    ("v100_ddp_rank1.json.gz", None, "other"),
])
def test_file_name_and_run_json_tell_hooks_from_run(tmp_path, name, beside, expected):
    path = tmp_path / name
    shutil.copy(V100, path)
    if beside:
        (tmp_path / beside).write_text('{"created": "2026-01-01T00:00:00"}')
    trace = load(path, progress=False)
    assert recorded_by(trace) == expected
    found = {f.rule: f for f in analyze(trace).findings}
    fix = found["no_python_stacks"].fix
    if expected == "hooks":
        assert record_full_advice(trace).startswith("the environment variable PROF_MODE=full")
        assert fix.startswith("Record again with the environment variable PROF_MODE=full")
        assert "goodhart-prof run" not in fix
    elif expected == "run":
        assert fix.startswith("Record again with goodhart-prof run --mode full:")
    else:
        assert "torch.profiler.profile(with_stack=True" in fix


def test_text_report_memory_line_follows_the_recorder(tmp_path):
    from tests.support.helpers import run_cmd
    path = tmp_path / "rank-0.pt.trace.json.gz"
    shutil.copy(DLRM, path)  # no memory events
    res = run_cmd(["-m", "goodhart_prof.cli", "analyze", str(path)])
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("Memory: "))
    assert "record with the environment variable PROF_MODE=full" in line and "goodhart-prof run" not in line
