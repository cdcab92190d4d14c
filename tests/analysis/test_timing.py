"""What each stage of an analysis cost (analysis/timing.py): `Stages` passes each stage's result
through, keeps stages in the order they ran, adds up a name run twice, and records a stage that
raised."""
from __future__ import annotations

import pytest

from goodhart_prof.analysis.timing import Stages


def test_run_returns_the_result_and_records_each_stage_in_order():
    stages = Stages()
    assert stages.run("load", lambda a, b: a + b, 2, 3) == 5
    assert stages.run("rules", sorted, [3, 1, 2]) == [1, 2, 3]
    assert list(stages.seconds) == ["load", "rules"]
    assert all(s >= 0 for s in stages.seconds.values())
    assert stages.total == pytest.approx(sum(stages.seconds.values()))


def test_a_name_run_twice_adds_up():
    stages = Stages()
    stages.seconds["kernels"] = 1.5  # as if a first run had cost 1.5 s
    stages.run("kernels", len, "abc")
    assert list(stages.seconds) == ["kernels"] and stages.seconds["kernels"] >= 1.5


def test_a_stage_that_raises_is_still_recorded():
    stages = Stages()
    with pytest.raises(ZeroDivisionError):
        stages.run("broken", lambda: 1 / 0)
    assert list(stages.seconds) == ["broken"]
    assert Stages().total == 0
