"""Sync rules (analysis/rules/syncs.py): per-iteration read-backs by what caused them (`.item()`,
nonzero, `if tensor:`), fired at their rates on hand-made traces, with the host's time in the
calls as the saving, and the advice that follows the site."""
from __future__ import annotations

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules import BY_ID
from tests.support.events import ann, cuda_item, load_events, memcpy, op, rt

ITEM_PER_ITERATION = BY_ID["item_logging"].limit("per_iteration")
BACKWARD_OP = "autograd::engine::evaluate_function: MmBackward0"


def rules(trace) -> dict[str, object]:
    return {f.rule: f for f in analyze(trace).findings}


def test_item_logging_fires_per_step_and_not_once_per_iteration(tmp_path):
    per_step = []
    for it in range(2):
        base = it * 10_000
        per_step.append(ann(f"ProfilerStep#{it}", base, 9_000))
        for k in range(3):  # three .item() per iteration: a per-step read-back
            per_step += cuda_item(base + 100 + 1000 * k, 10 * (it * 3 + k) + 1)
    found = rules(load_events(tmp_path, per_step, "many.json"))
    assert "item_logging" in found
    ev = found["item_logging"].evidence
    assert ev["count"] == 6 and ev["per_iteration"] == 3.0 >= ITEM_PER_ITERATION
    once = []
    for it in range(2):
        once.append(ann(f"ProfilerStep#{it}", it * 10_000, 9_000))
        once += cuda_item(it * 10_000 + 100, it + 1)  # metrics moved once per iteration: fine
    assert "item_logging" not in rules(load_events(tmp_path, once, "once.json"))


def test_nan_checks_fire_on_nonzero(tmp_path):
    events = [ann("ProfilerStep#3", 0, 5000)]
    for k in range(2):
        t = 100 + 1000 * k
        events += [op("aten::index", t, 300), op("aten::nonzero", t + 10, 200),
                   rt("cudaMemcpyAsync", t + 20, 20, 50 + k), rt("cudaStreamSynchronize", t + 50, 100, 60 + k),
                   memcpy("Memcpy DtoH (Device -> Pageable)", t + 60, 5, 50 + k)]
    found = rules(load_events(tmp_path, events))
    assert found["nan_checks"].evidence["count"] == 2
    assert "aten::nonzero" in found["nan_checks"].evidence["sites"][0]["site"]


def training(tmp_path, annotation, backward=True):
    """Two iterations, each two `.item()` (50 us each) inside `annotation` and one `if tensor:`
    (aten::is_nonzero of 60 us), and a backward op where `backward`."""
    events = []
    for it in range(2):
        base = 10_000 * it
        events += [ann(f"ProfilerStep#{it}", base, 9000), ann(annotation, base + 50, 3000),
                   *cuda_item(base + 100, 10 * it + 1), *cuda_item(base + 1100, 10 * it + 3),
                   op("aten::is_nonzero", base + 6000, 60), *cuda_item(base + 6002, 10 * it + 5)]
        if backward:
            events.append(op(BACKWARD_OP, base + 5000, 100))
    return analyze(load_events(tmp_path, events))


def test_item_reads_in_logging_code_get_the_logging_advice(tmp_path):
    f = {x.rule: x for x in training(tmp_path, "log_metrics").findings}["item_logging"]
    assert f.title == ".item() reads a tensor back to the host 2.0 times per iteration (most at log_metrics > aten::item)"
    assert (f.evidence["count"], f.evidence["wait_us"]) == (4, 200.0)
    assert f.est_saving_us == 100.0  # 4 reads of 50 us over 2 iterations
    assert f.fix.startswith("Keep metrics on the device")
    other = {x.rule: x for x in training(tmp_path, "rollout").findings}["item_logging"]
    assert other.fix.startswith("Each read makes the host wait for the GPU")  # a value the host needs


def test_a_branch_on_a_tensor_per_training_iteration(tmp_path):
    f = {x.rule: x for x in training(tmp_path, "rollout").findings}["branchy_value_head"]
    assert f.title == ("Python branches on tensor values (`if tensor:`) sync 1.0 times per iteration "
                       "(most at aten::is_nonzero)")
    assert (f.evidence["count"], f.evidence["wait_us"], f.est_saving_us) == (2, 120.0, 60.0)
    # advice about the update: not judged where nothing trains
    a = training(tmp_path, "rollout", backward=False)
    assert "branchy_value_head" not in {x.rule for x in a.findings}
    assert "no backward pass" in {n.rule: n.reason for n in a.not_judged}["branchy_value_head"]
