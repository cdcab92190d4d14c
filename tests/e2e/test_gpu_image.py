"""The training side runs on the GPU machine's image: torch, numpy, pandas, click, rich, tqdm, but
no msgspec, isal, perfetto or plotly (docs/gpu.md). Each check runs in a fresh interpreter whose
import system refuses those four packages, as that image would."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.support.blocked_imports import blocking_folder
from tests.support.paths import ROOT

REPO = ROOT
ABSENT = ("msgspec", "isal", "perfetto", "plotly")
READING_SIDE = ABSENT + ("pandas",)  # what the training process must not import at all


def run_blocked(code: str, tmp_path: Path, timeout: int = 240,
                absent: tuple[str, ...] = ABSENT) -> subprocess.CompletedProcess:
    hook = blocking_folder(tmp_path / "blocker", absent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROF_")}
    env["PYTHONPATH"] = os.pathsep.join([str(hook), str(REPO)])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=timeout)


def test_the_blocker_really_blocks(tmp_path):
    res = run_blocked("import msgspec", tmp_path)
    assert res.returncode == 1 and "No module named 'msgspec'" in res.stderr
    child = "import subprocess, sys\nsys.exit(subprocess.run([sys.executable, '-c', 'import pandas']).returncode)"
    res = run_blocked(child, tmp_path, absent=READING_SIDE)
    assert res.returncode == 1 and "No module named 'pandas'" in res.stderr  # its children too


def test_trainer_imports_without_the_reading_side(tmp_path):
    res = run_blocked("""
        import sys
        import trainer.train, trainer.launch, trainer.__main__
        import goodhart_prof.capture.hooks, goodhart_prof.capture.runs, goodhart_prof.capture.merging
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("msgspec", "isal", "perfetto",
                                                                    "plotly", "pandas")))
        print(sorted(m for m in sys.modules if m.startswith(("goodhart_prof.trace",
                                                              "goodhart_prof.analysis",
                                                              "goodhart_prof.report"))))
    """, tmp_path, absent=READING_SIDE)
    assert res.returncode == 0, res.stderr[-2000:]
    absent, reading = res.stdout.splitlines()
    assert absent == "[]"    # the capture side loads neither the reading side nor pandas
    assert reading == "[]"


@pytest.mark.slow
def test_trainer_trains_and_traces_without_the_reading_side(tmp_path):
    """An untraced run finishes; a traced run of two ranks writes its rank traces and run.json, and
    says in one line that they were not merged and why (no traceback). One rank has nothing to
    merge: no line, no merged trace."""
    toml = tmp_path / "tiny.toml"
    toml.write_text("n_envs = 16\nrollout_steps = 8\nminibatches = 2\nepochs = 1\n")
    common = (f"import sys; from trainer.__main__ import cli; sys.argv = ['trainer', "
              f"'--device', 'cpu', '--config', {str(toml)!r}, '--no-progress', ")
    res = run_blocked(common + "'--total-iterations', '3', '--output-dir', 'plain']\ncli()", tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    record = json.loads((tmp_path / "plain" / "run.json").read_text())
    assert record["iterations_run"] == 3 and record["merged_trace"] is None

    def traced(nproc: int, out: str) -> str:
        return ("import os; os.environ.update(PROF_ENABLED='1', PROF_ITERATIONS='1-1', "
                f"PROF_MODE='lite')\n{common}'--total-iterations', '3', '--nproc', '{nproc}', "
                f"'--output-dir', '{out}']\ncli()")

    res = run_blocked(traced(2, "traced"), tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    note = [ln for ln in res.stderr.splitlines() if "not merged" in ln]
    assert len(note) == 1 and note[0].endswith("msgspec is not installed (pip install msgspec; "
                                               "goodhart-prof analyze reads the rank traces as they are)")
    record = json.loads((tmp_path / "traced" / "run.json").read_text())
    assert record["merged_trace"] is None and record["profiling"]["iterations_traced"] == [1]
    assert record["traces"] == {r: f"traced/rank-{r}.pt.trace.json.gz" for r in "01"}  # relative to the cwd
    assert all((tmp_path / path).stat().st_size > 1000 for path in record["traces"].values())
    assert not (tmp_path / "traced" / "merged_trace.json").exists()

    res = run_blocked(traced(1, "one"), tmp_path)
    assert res.returncode == 0 and "not merged" not in res.stderr, res.stderr[-2000:]
    record = json.loads((tmp_path / "one" / "run.json").read_text())
    assert (record["traces"], record["merged_trace"]) == ({"0": "one/rank-0.pt.trace.json.gz"}, None)
    assert sorted(p.name for p in (tmp_path / "one").iterdir() if p.is_file()) == [
        "metrics.jsonl", "rank-0.pt.trace.json.gz", "run.json"]
