"""Fusion and compilation rules (analysis/rules/compilation.py): an optimizer step that launches
many kernels (foreach or a for-loop) and its fused fix, and a backward pass with no compiled
graph; hand-made training traces whose figures are worked by hand."""
from __future__ import annotations

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules.compilation import optimizer_fix
from tests.support.events import ann, launch, load_events, op

MM_BACKWARD = "autograd::engine::evaluate_function: MmBackward0"


def findings(tmp_path, step_kernel="multi_tensor_apply_kernel", backward=MM_BACKWARD, name="t.json"):
    """One iteration: a backward op, 50 GEMMs (100 us each), and an `Optimizer.step#Adam.step` of
    500 us on the host that launches ten 100 us `step_kernel`s."""
    events = [ann("ProfilerStep#1", 0, 20_000), op(backward, 100, 50)]
    for i in range(50):
        events += launch("gemm", 200 + 150 * i, i, op_name="aten::mm")
    events.append(ann("Optimizer.step#Adam.step", 9000, 500))
    for k in range(10):
        events += launch(step_kernel, 9010 + 40 * k, 100 + k)
    return {f.rule: f for f in analyze(load_events(tmp_path, events, name)).findings}


def test_a_foreach_step_is_not_fused(tmp_path):
    f = findings(tmp_path)["unfused_adam"]
    assert f.title == "the optimizer step (Adam, foreach) is not fused: 10 kernels per step"
    assert f.evidence == {"optimizer": ["Adam"], "implementation": "foreach", "optimizer_steps": 1,
                          "kernels_per_step": 10.0, "multi_tensor_kernels": 10, "gpu_us": 1000.0,
                          "cpu_us": 500.0}
    # the longer of GPU (10 x 100 us) and host (500 us) time, times 1 - 3/10
    assert f.est_saving_us == 1000.0 * (1 - 3 / 10)
    assert "fused=True" in f.fix and "already runs foreach" in f.fix


def test_a_for_loop_step_and_a_fused_step(tmp_path):
    loop = findings(tmp_path, step_kernel="elementwise_kernel", name="loop.json")["unfused_adam"]
    assert loop.evidence["implementation"] == "for-loop" and loop.evidence["multi_tensor_kernels"] == 0
    assert "unfused_adam" not in findings(tmp_path, step_kernel="fused_adam_kernel", name="fused.json")


def test_an_eager_backward_and_a_compiled_one(tmp_path):
    f = findings(tmp_path)["eager_update"]
    assert f.title == "the update runs eagerly: no compiled graph in the backward pass"
    assert f.evidence == {"kernels": 60, "backward_ops": 1, "backward_op_names": 1, "compiled_elsewhere": False}
    assert f.est_saving_us is None  # what compiling fuses is not in the trace
    assert "eager_update" not in findings(tmp_path, backward="CompiledFunctionBackward", name="compiled.json")


def test_optimizer_fix_per_optimizer():
    fix = optimizer_fix(["Adam", "SGD"], "for-loop")
    assert fix.startswith("The step launches kernels per parameter tensor")
    assert "torch.optim.Adam(params, ..., fused=True)" in fix and "torch.optim.SGD(params, ..., fused=True)" in fix
    assert "not with sparse gradients" in optimizer_fix(["Adagrad"], "foreach")
    assert "RMSprop's foreach or fused implementation" in optimizer_fix(["RMSprop"], "foreach")
