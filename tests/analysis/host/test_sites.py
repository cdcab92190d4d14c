"""Where a host event happened (analysis/host/sites.py): the chain of annotations and ops without stacks, torch's optimizer annotation named with the
user's call around it, and the package a torch-owned site names."""
from __future__ import annotations

import pytest

from goodhart_prof.analysis.host.sites import op_sites, torch_package
from tests.support.events import X, ann, load_events, op

def test_torch_package():
    site = "torch: torch/distributions/categorical.py:151 log_prob > aten::is_nonzero (called at ppo.py:82 f)"
    assert torch_package(site) == "torch.distributions"
    # one level below torch/ (the kept torch frames are packages: trace.model.KEPT_TORCH_FRAMES)
    assert torch_package("torch: torch/nn/utils/clip_grad.py:60 clip_grad_norm_ > aten::item "
                         "(called at x.py:1 g)") == "torch.nn"
    assert torch_package("trainer/ppo.py:82 get_action") is None


def frame(name, ts, dur, python_id, parent=-1):
    return X(name, "python_function", ts, dur, **{"Python id": python_id, "Python parent id": parent})


EVENTS = [ann("ProfilerStep#1", 0, 1000), ann("rollout", 10, 500), op("aten::mm", 20, 30),
          ann("Optimizer.step#Adam.step", 600, 100), op("aten::item", 610, 10), op("aten::add", 800, 5)]


def test_without_stacks_a_site_is_the_chain_without_the_step(tmp_path):
    trace = load_events(tmp_path, EVENTS)
    ops = trace.events.index[trace.events["cat"] == "cpu_op"]
    assert op_sites(trace, ops) == ["rollout > aten::mm", "Optimizer.step#Adam.step > aten::item", "aten::add"]
    assert op_sites(trace, ops[:0]) == []
    with pytest.raises(KeyError, match="1 rows are not in the trace's events"):
        op_sites(trace, [10 ** 6])


def test_with_stacks_the_optimizers_read_names_the_users_call(tmp_path):
    events = EVENTS + [frame("myloop/train.py(12): update", 5, 900, 1),
                       frame("torch/optim/adam.py(200): step", 590, 200, 2, parent=1)]
    trace = load_events(tmp_path, events)
    mm, item, add = op_sites(trace, trace.events.index[trace.events["cat"] == "cpu_op"])
    assert "update" in mm and "myloop/train.py" in mm and "rollout" not in mm  # the user's frame
    assert item.startswith("torch: Optimizer.step#Adam.step > aten::item (called at ")
    assert "myloop/train.py" in item
