"""What the rules produce (goodhart_prof/analysis/rules/finding.py): findings in the documented
severities, the largest saving first and those without one after; a skipped rule's reason is a
value that cannot be changed after the runner made it."""
from __future__ import annotations

import dataclasses

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules.finding import SEVERITIES, Finding, NotJudged
from goodhart_prof.trace.load import load
from tests.support.paths import DATA


def test_findings_of_a_real_trace_are_ordered_by_saving():
    a = analyze(load(DATA / "hta" / "mi250_minitoy_rocm.json.gz", progress=False))
    assert [(f.rule, f.severity) for f in a.findings] == [
        ("low_utilization", "high"), ("no_amp", "low"), ("no_python_stacks", "low")]
    savings = [f.est_saving_us for f in a.findings]
    assert savings[0] > savings[1] and savings[2] is None  # those without a saving last
    assert all(f.severity in SEVERITIES for f in a.findings)
    assert all(0 < f.est_saving_share <= 1 for f in a.findings if f.est_saving_us is not None)


def test_a_finding_defaults_to_no_saving_on_the_iteration_basis():
    f = Finding(rule="r", severity="low", title="t", evidence={"n": 1}, fix="do x")
    assert (f.est_saving_us, f.saving_note, f.est_saving_share, f.saving_basis) == (None, "", None, "iteration")


def test_not_judged_is_frozen():
    n = NotJudged("memory_growth", "fewer than 3 iterations")
    with pytest.raises(dataclasses.FrozenInstanceError):
        n.reason = "changed"
    assert n == NotJudged("memory_growth", "fewer than 3 iterations")
