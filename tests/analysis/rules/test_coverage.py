"""Coverage rules (analysis/rules/coverage.py): no_python_stacks fires where the trace has no
Python frames yet the report names places by op chains, says how to record them, and stays
silent with stacks or with nothing named."""
from __future__ import annotations

from goodhart_prof.analysis import analyze
from tests.support.events import X, ann, load_events, op

# a CPU-only loop: two host reads (aten::item) per step inside `rollout`, no GPU (no idle causes)
EVENTS = [ann("ProfilerStep#1", 0, 5000), ann("rollout", 10, 3000),
          op("aten::item", 100, 20), op("aten::_local_scalar_dense", 101, 18),
          op("aten::item", 1100, 20), op("aten::_local_scalar_dense", 1101, 18)]


def findings(tmp_path, events, name="t.json"):
    return {f.rule: f for f in analyze(load_events(tmp_path, events, name)).findings}


def test_sites_named_by_op_chains_fire(tmp_path):
    f = findings(tmp_path, EVENTS)["no_python_stacks"]
    assert f.title == ("no Python stacks in the trace: 1 sites and idle causes are named by annotation "
                       "and op chains, not source lines")
    assert f.evidence == {"sync_sites": 1, "idle_causes": 0, "findings_with_sites": ["item_logging"],
                          "examples": ["rollout > aten::item"], "recorded_by": "a profiler without with_stack"}
    assert f.severity == "low" and f.est_saving_us is None  # saves no time by itself
    assert f.fix.startswith("Profile with torch.profiler.profile(with_stack=True")


def test_silent_with_stacks_or_nothing_named(tmp_path):
    frame = X("myloop/train.py(5): main", "python_function", 0, 4000, **{"Python id": 1, "Python parent id": -1})
    assert "no_python_stacks" not in findings(tmp_path, EVENTS + [frame], "stacks.json")
    plain = [ann("ProfilerStep#1", 0, 5000), op("aten::add", 10, 5)]
    assert "no_python_stacks" not in findings(tmp_path, plain, "plain.json")


def test_no_finding_with_sites_is_not_listed_empty(tmp_path):
    """One host read a step is under item_logging's 2 a step: no finding names a site, and the
    evidence leaves the empty list out (it printed `findings with sites` and nothing)."""
    events = [ann("ProfilerStep#1", 0, 5000), ann("rollout", 10, 3000),
              op("aten::item", 100, 20), op("aten::_local_scalar_dense", 101, 18)]
    f = findings(tmp_path, events)["no_python_stacks"]
    assert "item_logging" not in findings(tmp_path, events)
    assert f.evidence == {"sync_sites": 1, "idle_causes": 0, "examples": ["rollout > aten::item"],
                          "recorded_by": "a profiler without with_stack"}
