"""torch.compile rules (analysis/rules/dynamo.py): graph_break and recompile on the planted loop
(tests/data/ours/compiled/graph_break), silent on the compiled trainer without either."""
from __future__ import annotations

import pytest

from goodhart_prof.analysis.facade import analyze
from goodhart_prof.trace.load import load
from tests.support.paths import DATA


@pytest.fixture(scope="module")
def planted():
    return analyze(load(DATA / "ours" / "compiled" / "graph_break"))


def test_the_graph_break_names_the_line_it_resumes_at(planted):
    (f,) = [f for f in planted.findings if f.rule == "graph_break"]
    assert f.title == "torch.compile's graph breaks in update at graph_break_loop.py:18 (1.0 per iteration)"
    assert f.evidence["breaks"] == [{"function": "update", "file": "graph_break_loop.py", "line": 18, "frame": 1,
                                     "inside_frame": 0, "calls": 2, "times_per_iteration": 1.0}]
    assert f.est_saving_us is None and "fullgraph=True" in f.fix


def test_the_recompile_inside_the_window_saves_its_compile_time(planted):
    (f,) = [f for f in planted.findings if f.rule == "recompile"]
    seconds = planted.compile.compiles[0]["seconds"] + planted.compile.compiles[1]["seconds"]
    assert f.title == (f"torch.compile compiled 2 times inside the traced iterations ({seconds:.2f} s in "
                         "iteration 4): frame/entry 0/1, 1/1")
    assert f.est_saving_us == pytest.approx(seconds * 1e6 / 2)  # over the 2 traced iterations
    assert f.severity == "high" and "mark_dynamic" in f.fix


def test_silent_on_the_compiled_trainer():
    rules = {f.rule for f in analyze(load(DATA / "gpu" / "h200_2026-11-26" / "lite" / "clean")).findings}
    assert not rules & {"graph_break", "recompile"}
