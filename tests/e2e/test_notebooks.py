"""Execute every notebook in notebooks/ top to bottom and check what it shows against the library.

The notebooks hold no assertion cells: they tell the story; the checks live here. Each notebook
runs on its default fixture, then the text it printed is compared with figures this test computes
itself from the same fixture.

The kernel is this interpreter: a `python3` kernelspec pointing at sys.executable is put first on
JUPYTER_PATH, so neither a user-level kernelspec nor a home folder is needed (CI has neither),
and the runtime and IPython folders go to the test's temporary folder.
"""
from __future__ import annotations

import json
import sys
import time

import pytest

import goodhart_prof
from goodhart_prof.report.common import saving_text
from goodhart_prof.units import duration
from tests.support.paths import DATA, ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = ROOT / "notebooks"
OWLV2 = ROOT / "tests/data/tracelens/h100_owlv2_inference.json.gz"
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


def execute(name: str) -> list[str]:
    """Run notebooks/NAME top to bottom; returns each code cell's printed text and plain-text results."""
    book = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(book)
    assert not any("assert " in c.source for c in book.cells if c.cell_type == "code"), \
        "checks belong in tests/e2e/test_notebooks.py, not in the notebook"
    book.cells.append(nbformat.v4.new_code_cell(WHO_RUNS))
    started = time.perf_counter()
    nbclient.NotebookClient(book, kernel_name="python3", timeout=120,
                            resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    elapsed = time.perf_counter() - started
    assert elapsed < 30, f"{name} took {elapsed:.1f} s"  # aim: under 10 s
    texts = []
    for cell in book.cells:
        if cell.cell_type != "code":
            continue
        parts = [o.get("text", "") for o in cell.outputs if o.output_type == "stream"]
        parts += [o.get("data", {}).get("text/plain", "") for o in cell.outputs
                  if o.output_type in ("execute_result", "display_data")]
        texts.append("".join(parts))
    executable, prefix = texts.pop().strip().splitlines()
    assert (executable, prefix) == (sys.executable, sys.prefix)  # the venv's interpreter, not python3 on PATH
    return texts


def test_there_are_notebooks():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == [
        "01_first_look.ipynb", "02_sync_points.ipynb", "03_ab_compare.ipynb"]


def test_first_look(kernel_env):
    texts = execute("01_first_look.ipynb")
    a = goodhart_prof.analyze(OWLV2)
    assert texts[0].startswith(f"h100_owlv2_inference.json.gz: {len(a.trace.events):,} events, ranks [0]")
    shown_rules = [line.split()[1].rstrip(":") for line in texts[1].splitlines() if not line.startswith(" ")]
    assert shown_rules == [f.rule for f in a.findings] and shown_rules  # the findings, in the report's order
    assert shown_rules[0] == "low_utilization" and saving_text(a.findings[0]) in texts[1]  # ~488 ms/iteration first
    busy = a.gpu["busy_us"].iloc[0]
    assert duration(busy) in texts[2] and "52.6%" in texts[2]  # busy 566.759 ms of 1.078 s (TraceLens's figures)
    top = a.kernels.iloc[0]
    assert duration(top["total_us"]) in texts[3] and f"{top['count']:,}" in texts[3]


def test_sync_points(kernel_env):
    texts = execute("02_sync_points.ipynb")
    a = goodhart_prof.analyze(OWLV2)
    assert texts[0].strip() == f"82 sync points, host time {duration(a.sync_points['dur'].sum())}"
    top_site = a.syncs.sites.iloc[0]
    assert top_site["site"][:40] in texts[2] and duration(top_site["total_us"]) in texts[2]


def test_sync_points_of_a_cpu_run_show_its_host_reads(kernel_env, monkeypatch):
    """Our trainer on the CPU with --inject item_logging: no sync point (nothing to wait for), but
    the host reads a GPU would wait on, shown in the same cells (the notebook showed nothing)."""
    run = DATA / "ours" / "ab" / "item_logging"
    monkeypatch.setenv("GOODHART_TRACE", str(run))
    texts = execute("02_sync_points.ipynb")
    a = goodhart_prof.analyze(run)
    assert a.syncs.total == 0 and a.reads.total > 0
    assert texts[0].strip() == (f"{a.reads.total:,} host reads, host time {duration(a.host_reads['dur'].sum())} "
                                "(a CPU-only trace: each would be a sync point on a GPU)")
    top_site = a.reads.sites.iloc[0]
    assert top_site["site"][:30] in texts[2] and duration(top_site["total_us"]) in texts[2]


def test_ab_compare(kernel_env):
    from goodhart_prof.analysis.compare.comparison import compare
    from goodhart_prof.trace.run_record import read_run

    texts = execute("03_ab_compare.ipynb")
    ab = ROOT / "tests/data/ours/ab"
    a, b = goodhart_prof.analyze(ab / "clean_1"), goodhart_prof.analyze(ab / "item_logging")
    c = compare(a, b, read_run(ab / "clean_1"), read_run(ab / "item_logging"))
    assert texts[0].splitlines()[0] == c.iterations_line
    assert texts[0].splitlines()[2] == f"Machine speed: {c.speed_check}" and c.speed_check.startswith("held: ")
    head = texts[1].splitlines()
    worse = c.worse.iloc[0]
    assert head[:3] == ["What got better: nothing", "What got worse: 1",
                        f"  host_read item: {worse.a:.2f} -> {worse.b:.2f} per iteration ({worse.ratio:.2f}x); "
                        "the site that changed most: rollout > env_step > aten::item"]
    assert head[3] == "within noise: " + ", ".join(c.within_noise["item"])  # every time figure
    assert len(c.within_noise) == len(c.spread)
    item = next(f for f in b.findings if f.rule == "item_logging")
    assert "item_logging" in texts[5] and "rollout > env_step > aten::item" in texts[5]
    assert saving_text(item) in texts[5] and item.severity == "low"  # microseconds on a CPU: low


def test_ab_compare_without_run_records_says_speed_was_not_checked(kernel_env, tmp_path, monkeypatch):
    """Two bare traces (no run.json, no metrics.jsonl): no profiler cost on either side, so the
    drift check cannot run, and the notebook must say so instead of claiming the machine held."""
    import shutil
    ab = ROOT / "tests/data/ours/ab"
    for side, run in (("A", "clean_1"), ("B", "item_logging")):
        bare = tmp_path / side
        bare.mkdir()
        shutil.copy(ab / run / "rank-0.pt.trace.json.gz", bare / "rank-0.pt.trace.json.gz")
        monkeypatch.setenv(f"GOODHART_TRACE_{side}", str(bare / "rank-0.pt.trace.json.gz"))
    texts = execute("03_ab_compare.ipynb")
    lines = texts[0].splitlines()
    assert lines[2].startswith("Machine speed: not checked: A and B have no run record")
    assert "held" not in lines[2].split(":", 2)[2].split("assume")[0]
