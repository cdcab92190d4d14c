"""report/diff/page.py: the `diff --html` page. Figures written as the analyze page writes them (three
significant digits, one unit per interval), charts in ms read from the comparison's tables (the
MI250 trace's host-to-device copies summed from its raw events), the no-clobber rule."""
from __future__ import annotations

import gzip
import json
import re

import pytest

from goodhart_prof.errors import UserError
from goodhart_prof.report.diff.page import figures, page, write_html
from tests.support.diffs import MI250, ab_comparison, gpu_comparison, phase_pair


@pytest.fixture(scope="module")
def planted():
    """tests/data/ours/ab: clean_1 (A) against item_logging (B)."""
    return ab_comparison()


def test_html_numbers_are_formatted(planted):
    html = page(planted)
    body = re.sub(r"<script.*?</script>", "", html, flags=re.S)
    assert "3,916,281" not in body and not re.search(r"\d,\d{3}\.\d{3}<", body)
    for raw in ("low_a", "high_a", "iteration_us", "impact_us"):
        assert f">{raw}<" not in body
    summary = re.search(r"<td>iteration time</td>(.*?)</tr>", body).group(1)
    assert "<td>47.8 ms</td>" in summary and "<td>46.9 ms</td>" in summary and "within noise" in summary
    assert "<td>36.7-58.7 ms</td>" in body  # A's interval of the iteration time, one unit
    axes = re.findall(r'"title":\{"text":"([^"]*)"\}', html)
    assert "ms" in axes and "us" not in axes  # the charts' times in ms, as the analyze page's


def test_gpu_pair_charts_in_ms(tmp_path):
    figs = figures(gpu_comparison(), top=3)
    assert [f.layout.title.text for f in figs] == [
        "GPU time by kernel category", "Top 3 kernels by GPU time", "Sync points by kind",
        "Phases: CPU time per annotation"]
    with gzip.open(MI250, "rt") as fh:
        copies = sum(e["dur"] for e in json.load(fh)["traceEvents"]
                     if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy")
    a, b = figs[0].data
    assert (a.name, b.name) == ("A", "B")
    memcpy = list(a.x).index("memcpy")
    assert a.y[memcpy] == pytest.approx(copies / 1e3)  # 38.161 us of HtoD copies, in ms


def test_one_side_only_phase_on_the_page(tmp_path):
    c = phase_pair(tmp_path)
    (fig,) = figures(c)
    a, b = fig.data
    assert list(a.y) == ["logging", "rollout"] and list(a.x) == [0.0, 1.0] and list(b.x) == [1.0, 1.0]
    html = page(c)
    row = re.search(r"<tr><td>logging</td>(.*?)</tr>", html).group(1)
    assert "<td>only in B</td>" in row and "<td>200 us</td>" in row


def test_write_html_keeps_an_existing_file_unless_forced(tmp_path):
    c = phase_pair(tmp_path)
    out = tmp_path / "diff.html"
    out.write_text("mine")
    with pytest.raises(UserError, match="already exists"):
        write_html(c, out)
    assert out.read_text() == "mine"
    assert write_html(c, out, force=True) == out
    assert out.read_text().startswith("<!DOCTYPE html>") and "goodhart-prof diff" in out.read_text()
