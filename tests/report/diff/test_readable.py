"""`diff` says what it means (issue 35 items 6 and 5): readable rows with units and verdicts, a phase
on one side only, host ops compared, a warning for runs recorded differently, and every table
fitting 80, 100 and 160 columns (the text's wording: test_text.py; the page's numbers: test_page.py).

Fixtures: tests/data/ours/ab/{clean_1,clean_2,item_logging} (SOURCES.md): runs of our trainer
with one configuration, the last with `--inject item_logging` (8 more `.item()` reads per
iteration: iteration time must not read "better").
"""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.compare.comparison import compare
from goodhart_prof.analysis.compare.summary import recording_warning
from tests.support.diffs import steps_trace
from tests.support.helpers import run_main
from goodhart_prof.report.common import SafeConsole
from goodhart_prof.report.diff.format import interval
from goodhart_prof.report.diff.document import to_document
from goodhart_prof.report.diff.text import render
from goodhart_prof.trace.load import load
from goodhart_prof.trace.run_record import read_run
from tests.support.paths import DATA as FIXTURES

DATA = FIXTURES / "ours"
AB = DATA / "ab"
WIDTHS = (80, 100, 160)


def side(path: Path):
    return analyze(load(path)), read_run(path)


@pytest.fixture(scope="module")
def planted():
    """clean_1 (A) against item_logging (B)."""
    (a, ra), (b, rb) = side(AB / "clean_1"), side(AB / "item_logging")
    return compare(a, b, ra, rb)


def text(c, width: int) -> str:
    out = io.StringIO()
    render(c, SafeConsole(file=out, width=width, color_system=None), top=15)
    return out.getvalue()


# -- names, units, verdicts ------------------------------------------------------------------------
def test_summary_rows_have_names_units_and_verdicts(planted):
    s = planted.summary.set_index("metric")
    it = s.loc["iteration_us"]
    assert (it["name"], it["unit"]) == ("iteration time", "time")
    # B is 0.98x A by the mean, but the per-iteration intervals overlap: within noise, never better
    assert it["b"] < it["a"] and it["verdict"] == "within noise"
    spread = planted.spread.set_index(["kind", "item"])
    assert spread.at[("iteration", "iteration time"), "verdict"] == "within noise"
    assert not ((planted.better["kind"] == "iteration") | (planted.better["kind"] == "throughput")).any()
    assert (s.loc["syncs_per_iteration", ["name", "unit", "verdict"]].tolist()
            == ["syncs per iteration", "per_iteration", "same"])  # exact counts, both 0
    assert s.loc["sync_wait_us", "verdict"] == "not judged"
    assert "no per-iteration samples" in s.loc["sync_wait_us", "why"]
    assert s.loc["iterations", "why"] == "neither higher nor lower is better"


def test_host_ops_are_compared_with_verdicts(planted):
    h = planted.host_ops.set_index("name")
    # item_logging's logging computes a mean and a division per read: 192 -> 288 calls each, and
    # their self time per iteration moves beyond both intervals
    for op in ("aten::mean", "aten::div_"):
        assert (h.at[op, "calls_a"], h.at[op, "calls_b"]) == (192, 288)
        assert h.at[op, "verdict"] == "worse" and h.at[op, "high_a"] < h.at[op, "low_b"]
    assert h.at["aten::mkldnn_convolution", "verdict"] == "within noise"
    assert set(h["verdict"]) <= {"better", "worse", "within noise", "not judged", "only in A", "only in B"}
    out = text(planted, 160)
    rows = [x for x in out.splitlines() if x.startswith("aten::mean ") or x.startswith("aten::div_ ")]
    assert len(rows) == 2 and all(r.rstrip().endswith("worse") for r in rows)
    doc = to_document(planted, top=5)
    assert [r["name"] for r in doc["host_ops"]] == planted.host_ops["name"].head(5).tolist()


# -- one side only ---------------------------------------------------------------------------------
def test_a_phase_on_one_side_is_only_there(tmp_path, capsys):
    pa = steps_trace(tmp_path / "a.json", ("rollout",))
    pb = steps_trace(tmp_path / "b.json", ("rollout", "logging"))
    c = compare(analyze(load(pa)), analyze(load(pb)))
    spread = c.spread.set_index(["kind", "item"])
    assert spread.at[("phase", "logging"), "verdict"] == "only in B"
    assert spread.at[("phase", "rollout"), "verdict"] == "within noise"
    assert ("phase", "logging") not in set(zip(c.headline["kind"], c.headline["item"]))
    code, out, _ = run_main(["diff", str(pa), str(pb)], capsys)
    assert code == 0
    row = next(x for x in out.splitlines() if x.startswith("logging ") and "only in B" in x)
    assert "-" in row.split()  # A has no value: a dash, not 0.0 us
    assert "better" not in row and "worse" not in row
    # the other way round it disappears: only in A, not "better"
    c = compare(analyze(load(pb)), analyze(load(pa)))
    assert c.spread.set_index(["kind", "item"]).at[("phase", "logging"), "verdict"] == "only in A"
    assert c.better.empty


# -- recorded differently ----------------------------------------------------------------------------
def test_lite_against_full_warns(tmp_path, capsys):
    full = tmp_path / "full"
    shutil.copytree(AB / "clean_2", full)
    record = json.loads((full / "run.json").read_text())
    record["profiling"]["mode"] = "full"
    (full / "run.json").write_text(json.dumps(record))
    code, out, _ = run_main(["diff", str(AB / "clean_1"), str(full)], capsys)
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith("Warning: A and B were recorded differently: A was recorded in lite mode and B in full")
    code, out, _ = run_main(["diff", str(AB / "clean_1"), str(full), "--json"], capsys)
    doc = json.loads(out)
    assert doc["recording"]["a"]["mode"] == "lite" and doc["recording"]["b"]["mode"] == "full"
    assert doc["recording_warning"].startswith("A and B were recorded differently")
    code, out, _ = run_main(["diff", str(AB / "clean_1"), str(AB / "clean_2"), "--json"], capsys)
    assert json.loads(out)["recording_warning"] is None


def test_stacks_or_devices_that_differ_warn(capsys):
    # no run.json: the mode is read off the trace (Python stacks or not)
    code, out, _ = run_main(["diff", str(DATA / "cpu_item_logging_lite.json.gz"),
                             str(DATA / "cpu_full_mode.pt.trace.json.gz")], capsys)
    assert code == 0 and out.splitlines()[0].startswith(
        "Warning: A and B were recorded differently: B holds Python stacks (full mode) and A does not")
    a = {"mode": "lite", "stacks": False, "device": "NVIDIA H100 80GB HBM3"}
    assert recording_warning(a, dict(a)) is None
    line = recording_warning(a, {**a, "device": "NVIDIA H200"})
    assert "A ran on NVIDIA H100 80GB HBM3 and B on NVIDIA H200" in line and "mode" not in line
    assert recording_warning(a, {**a, "device": None}) is None  # unknown is no difference


# -- widths ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("width", WIDTHS)
def test_every_table_fits_and_intervals_stay_whole(planted, width):
    out = text(planted, width)
    lines = out.splitlines()
    assert max(len(x) for x in lines) <= width
    for r in planted.spread.itertuples():  # every interval printed whole, on one line
        for low, high in ((r.low_a, r.high_a), (r.low_b, r.high_b)):
            band = interval(r.metric, low, high)
            assert band and band in out
    names = [x.split("│")[0].strip() for x in lines if "│" in x and x.startswith("aten::")]
    assert len(names) == len(set(names))


def test_clean_runs_fit_at_each_width(capsys):
    (a, ra), (b, rb) = side(AB / "clean_1"), side(AB / "clean_2")
    c = compare(a, b, ra, rb)
    for width in WIDTHS:
        assert max(len(x) for x in text(c, width).splitlines()) <= width


def test_gpu_pair_fits_and_kernels_stay_distinct():
    """A GPU pair (H200, lite against full, our trainer): kernel, device and memory tables at
    each width; two different kernels never print alike."""
    gpu = FIXTURES / "gpu" / "h200_2026-11-26"
    (a, ra), (b, rb) = side(gpu / "lite" / "clean"), side(gpu / "full" / "clean")
    c = compare(a, b, ra, rb)
    assert c.recording_warning.startswith("A and B were recorded differently: A was recorded in lite mode")
    for width in WIDTHS:
        out = text(c, width)
        lines = out.splitlines()
        assert max(len(x) for x in lines) <= width, width
        assert "Top 15 of" in out and "GPU devices" in out and "Memory" in out
        top = c.kernels.head(15)
        block = out[out.index("Top 15 of"):out.index("Sync points by kind")]
        shown = [x.split("│")[0].strip() for x in block.splitlines()[3:] if "│" in x]
        assert len(shown) == len(top) == len(set(shown))
