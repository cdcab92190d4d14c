"""The HTML report's torch.compile section (report/html/compile_section.py)."""
from __future__ import annotations

from goodhart_prof.analysis.facade import analyze
from goodhart_prof.report.html.compile_section import compile_section
from goodhart_prof.trace.load import load
from tests.support.paths import DATA


def test_the_section_has_the_break_the_compiles_and_the_regions():
    html = compile_section(analyze(load(DATA / "ours" / "compiled" / "graph_break")))
    assert html.startswith('<section id="compile"><h2>torch.compile</h2>')
    assert "<td>update at graph_break_loop.py:18</td><td>1</td><td>0</td><td>1.0</td>" in html
    assert "<td>4</td><td>0/1</td><td>1.10</td>" in html and "<td>4</td><td>1/1</td><td>0.86</td>" in html
    assert "torch_dynamo_resume_in_update_at_18" in html
