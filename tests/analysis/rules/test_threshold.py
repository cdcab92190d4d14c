"""rules/threshold.py: one value-plus-reason type for a rule's thresholds and the severity shares."""
from __future__ import annotations

import dataclasses

import pytest

from goodhart_prof.analysis.rules.savings import SEVERITY_SHARES, severity_of
from goodhart_prof.analysis.rules.threshold import Threshold
from goodhart_prof.analysis.rules.utilization import RULES


def test_severity_shares_are_thresholds_and_rank_a_saving():
    assert SEVERITY_SHARES["high"] == Threshold(0.10, SEVERITY_SHARES["high"].reason)
    assert [SEVERITY_SHARES[s].value for s in ("high", "medium")] == [0.10, 0.02]
    assert [severity_of(s) for s in (0.10, 0.0999, 0.02, 0.0199)] == ["high", "medium", "medium", "low"]


def test_a_rules_thresholds_are_the_same_type_and_frozen():
    low_util = next(r for r in RULES if "utilization" in r.thresholds)
    t = low_util.thresholds["utilization"]
    assert type(t) is Threshold and t.value == 0.5 and t.reason == "the GPU waits more than it works"
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.value = 0.6
