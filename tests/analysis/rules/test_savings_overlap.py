"""Findings' savings are each measured alone: where they add up to more than the iteration they
overlap, and the report says so with the combined bound (rules/savings.py `overlap`)."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from goodhart_prof.analysis import analyze
from goodhart_prof.report import json_report
from goodhart_prof.report.text import report as text
from goodhart_prof.report.html.page import render_html
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

DLRM = DATA / "param" / "dlrm_8rank"
V100 = DATA / "hta" / "v100_ddp_rank1.json.gz"


@pytest.fixture(scope="module")
def dlrm():
    return analyze(load(DLRM, progress=False))


def _text(a) -> str:
    out = io.StringIO()
    text.render(a, Console(file=out, width=400, color_system=None))
    return out.getvalue()


def test_dlrm_savings_overlap_and_the_bound_is_the_iteration(dlrm):
    doc = json_report.to_document(dlrm)
    shared = doc["savings_overlap"]
    shares = [f["est_saving_share"] for f in doc["findings"] if f["est_saving_share"] is not None]
    assert sum(shares) > 1.2  # low_utilization 62% + straggler 32% + tiny_batch 31% + ...
    assert shared["sum_share"] == pytest.approx(sum(shares), abs=1e-3)
    assert shared["sum_us"] == pytest.approx(
        sum(f["est_saving_us"] for f in doc["findings"] if f["est_saving_us"] is not None), abs=0.01)
    # the bound: the iteration itself (the one ProfilerStep#10, 16.0 ms), not the 122% sum
    assert shared["basis"] == "iteration"
    assert shared["basis_us"] == pytest.approx(16008, rel=0.01)
    assert shared["bound_us"] == shared["basis_us"] < shared["sum_us"]
    assert shared["largest_rule"] == doc["findings"][0]["rule"] == "low_utilization"
    # rank 7's idle time within its step (12,509 us step span, 2,659 us busy: 9,850 us) of the
    # 16,008 us mean iteration; over its first-to-last span it was 8,308 us (0.519)
    assert shared["largest_share"] == pytest.approx(9850 / 16008, abs=0.001)
    assert "do not add" in shared["note"] and f"{shared['sum_share']:.0%} of an iteration" in shared["note"]
    printed = " ".join(_text(dlrm).split())
    assert f"savings overlap: the estimated savings add up to {shared['sum_share']:.0%} of an iteration" in printed
    assert "no more than an iteration (16 ms)" in printed
    assert "Savings overlap:" in render_html(dlrm)


def test_savings_that_fit_the_iteration_have_no_overlap_note():
    a = analyze(load(V100, progress=False))
    doc = json_report.to_document(a)
    assert 0 < sum(f["est_saving_share"] or 0 for f in doc["findings"]) < 1
    assert doc["savings_overlap"] is None
    assert "savings overlap" not in _text(a) and "Savings overlap" not in render_html(a)
