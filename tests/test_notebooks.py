"""Execute every notebook in notebooks/ top to bottom (their last cells assert on the results).

The kernel is this interpreter: a `python3` kernelspec pointing at sys.executable is put first on
JUPYTER_PATH, so neither a user-level kernelspec nor a home folder is needed (CI has neither),
and the runtime and IPython folders go to the test's temporary folder.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
WHO_RUNS = "import sys; print(sys.executable); print(sys.prefix)"


@pytest.fixture
def kernel_env(tmp_path, monkeypatch):
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (goodhart-prof venv)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    for name in ("GOODHART_TRACE", "GOODHART_TRACE_A", "GOODHART_TRACE_B"):
        monkeypatch.delenv(name, raising=False)  # the notebooks' defaults: the fixtures


def test_there_are_notebooks():
    assert [p.name for p in NOTEBOOKS] == ["01_first_look.ipynb", "02_sync_points.ipynb",
                                           "03_ab_compare.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, kernel_env):
    book = nbformat.read(path, as_version=4)
    nbformat.validate(book)
    assert book.cells[-1].cell_type == "code" and "assert" in book.cells[-1].source
    book.cells.append(nbformat.v4.new_code_cell(WHO_RUNS))
    started = time.perf_counter()
    nbclient.NotebookClient(book, kernel_name="python3", timeout=120,
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    elapsed = time.perf_counter() - started
    checks = "".join(o.get("text", "") for o in book.cells[-2].outputs if o.output_type == "stream")
    assert "checks passed" in checks
    executable, prefix = book.cells[-1].outputs[0]["text"].strip().splitlines()
    assert (executable, prefix) == (sys.executable, sys.prefix)  # the venv's interpreter, not python3 on PATH
    assert elapsed < 30, f"{path.name} took {elapsed:.1f} s"  # aim: under 10 s
