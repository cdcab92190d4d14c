"""run.json is checked before `log add` (and the run folders) use it: its size, its nesting and
the types of the fields we read (tests/support/broken_corpus.py `run_json_cases`)."""
from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support import broken_corpus
from tests.support.helpers import clean_env, error_lines
from tests.support.paths import DATA as FIXTURES

DATA = FIXTURES / "ours" / "ab"


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return broken_corpus.run_json_cases(tmp_path_factory.mktemp("run_json"))


def _log_add(folder: Path, log: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "goodhart_prof.cli", "log", "add", str(folder),
                           "--change", "c", "--log", str(log)], capture_output=True, text=True,
                          timeout=120, env=clean_env())


def test_log_add_refuses_a_hostile_run_json_in_one_line(cases, tmp_path):
    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(cases, pool.map(lambda c: _log_add(c.path.parent, tmp_path / f"{c.name}.md"),
                                           cases.values())))
    for name, case in cases.items():
        res = results[name]
        assert "Traceback" not in res.stderr, (name, res.stderr[-2000:])
        assert res.returncode == 2, (name, res.returncode, res.stderr[-2000:])
        lines = error_lines(res.stderr)
        assert len(lines) == 1 and lines[0].startswith(f"Error: {case.path}: "), (name, lines)
        assert case.error in lines[0], (name, lines[0])
        assert not (tmp_path / f"{name}.md").exists()  # no row written


def test_the_run_folders_skip_a_hostile_run_json(cases):
    from goodhart_prof.trace import run_folders

    for case in cases.values():
        assert run_folders.run_in(case.path.parent) is None, case.name


def test_a_huge_run_json_is_refused_by_its_size_before_it_is_read(cases):
    from goodhart_prof.trace import run_json

    case = cases["run_json_huge"]
    size = case.path.stat().st_size
    with pytest.raises(run_json.RunJsonError, match=rf"not a run.json \({size:,} bytes; a run.json is "
                                                    r"at most 16 MiB\)$"):
        run_json.read_run_json(case.path)


@pytest.mark.parametrize("name", ["clean_1", "clean_2", "item_logging"])
def test_the_trainers_own_run_json_passes(name):
    from goodhart_prof.trace.run_record import read_run

    run = read_run(DATA / name)
    assert run is not None and run.env_steps_per_s > 0 and run.window == (10, 15)
