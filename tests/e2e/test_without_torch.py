"""The analyzer without torch (issue 35 item 12): torch is the [trainer] extra, and every command
that reads traces works where it cannot be imported (a machine with `pip install goodhart-prof`
alone); `run` says in one line what it needs. Every process here is refused torch by an import
hook (tests/support/blocked_imports.py), as a fresh venv without it would."""
from __future__ import annotations

import json
import os
import sys
import tomllib

import pytest

from tests.support.blocked_imports import blocking_folder
from tests.support.helpers import clean_env, error_lines, run_cmd
from tests.support.paths import DATA, ROOT

RUN = DATA / "ours" / "ab" / "clean_1"


def test_torch_is_an_extra_not_a_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.split(">")[0].split("=")[0].strip() == "torch"]
    assert project["optional-dependencies"]["trainer"] == ["torch>=2.4"]
    assert not any(d.startswith("torch") for d in project["optional-dependencies"]["test"])


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory):
    hook = blocking_folder(tmp_path_factory.mktemp("no_torch"), ("torch",))
    return clean_env(PYTHONPATH=os.pathsep.join([str(hook), str(ROOT)]), COLUMNS="120")


def test_the_hook_refuses_torch(no_torch):
    res = run_cmd(["-c", "import torch"], env=no_torch)
    assert res.returncode == 1 and "No module named 'torch'" in res.stderr


def test_analyze_diff_export_and_log_read_traces_without_torch(no_torch, tmp_path):
    analyzed = run_cmd(["-m", "goodhart_prof.cli", "analyze", str(RUN), "--json"], env=no_torch)
    assert analyzed.returncode == 0, analyzed.stderr
    assert json.loads(analyzed.stdout)["iterations"]["count"] == 6
    diffed = run_cmd(["-m", "goodhart_prof.cli", "diff", str(RUN), str(DATA / "ours" / "ab" / "item_logging")],
                     env=no_torch)
    assert diffed.returncode == 0, diffed.stderr
    out = tmp_path / "out.json.gz"
    exported = run_cmd(["-m", "goodhart_prof.cli", "export", str(RUN), "-o", str(out)], env=no_torch)
    assert exported.returncode == 0 and out.stat().st_size > 0, exported.stderr
    logged = run_cmd(["-m", "goodhart_prof.cli", "log", "add", str(RUN), "--change", "x", "--log",
                      str(tmp_path / "PERFLOG.md")], env=no_torch)
    assert logged.returncode == 0, logged.stderr


def test_run_says_what_the_trainer_needs_and_runs_a_command(no_torch, tmp_path):
    trainer = run_cmd(["-m", "goodhart_prof.cli", "run", "--output-dir", str(tmp_path / "runs")], env=no_torch)
    assert trainer.returncode == 2
    assert error_lines(trainer.stderr) == [
        "Error: goodhart-prof run trains the bundled trainer, which needs torch (not installed): "
        "pip install 'goodhart-prof[trainer]', or run your own loop: goodhart-prof run -- python my_train.py"]
    assert not (tmp_path / "runs").exists()
    command = run_cmd(["-m", "goodhart_prof.cli", "run", "--output-dir", str(tmp_path / "runs"), "--",
                       sys.executable, "-c", "print('a loop without hooks')"], env=no_torch)
    assert command.returncode == 0, command.stderr
    assert "a loop without hooks" in command.stdout
    assert "does the command call goodhart_prof.capture.hooks" in error_lines(command.stderr)[-1]
