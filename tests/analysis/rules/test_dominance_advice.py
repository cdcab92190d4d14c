"""What to change when one kernel dominates (analysis/rules/dominance_advice.py): `faster_path`
asked directly, on hand-made traces: eager attention's softmax to SDPA (its whole time saved),
fp32 GEMMs to bf16 autocast (half their time, advice by the GPU's compute capability), and the
generic advice with no price where no faster path is known. The rule around it, and the
channels_last path, are in test_dominance.py."""
from __future__ import annotations

import json

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.gpu.kernels import gpu_with_category
from goodhart_prof.analysis.rules import BY_ID
from goodhart_prof.analysis.rules.base import Context
from goodhart_prof.analysis.rules.dominance_advice import NO_PATH, faster_path
from goodhart_prof.trace.load import load
from tests.support.events import ann, launch, load_events

RULE = BY_ID["dominant_kernel"]
SGEMM = "volta_sgemm_128x64_nn"
SOFTMAX = "void cunn_SoftMaxForward<float>(float*)"
BF16_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64"


def advice_for(trace, kernel_name):
    """faster_path for `kernel_name`'s rows as the dominant work (the rule's own selection)."""
    g = gpu_with_category(trace)
    kern = g[(g["name"] == kernel_name).to_numpy()]
    return faster_path(Context(analyze(trace)), RULE, g, kern, kern)


def step(*kernels):
    """One step; each (kernel, op) launched 3 times, 100 us each (launch's kernels)."""
    events, corr = [ann("ProfilerStep#1", 0, 100_000)], 0
    for i in range(3):
        for name, op_name in kernels:
            corr += 1
            events += launch(name, 1000 + 300 * corr, corr, op_name)
    return events


def test_a_softmax_beside_batched_matmuls_is_eager_attention(tmp_path):
    trace = load_events(tmp_path, step(("volta_sgemm_128x64_nn_bmm", "aten::bmm"), (SOFTMAX, "aten::_softmax")))
    advice = advice_for(trace, SOFTMAX)
    assert advice.path == "sdpa" and "scaled_dot_product_attention" in advice.fix
    assert advice.saved_us == 300.0  # the three softmax kernels' whole time


def test_fp32_gemms_point_to_bf16_saving_half_their_time(tmp_path):
    events = step((SGEMM, "aten::addmm"))
    advice = advice_for(load_events(tmp_path, events), SGEMM)
    assert advice.path == "bf16_autocast" and advice.saved_us == 150.0
    assert advice.fix.startswith("These GEMMs run in fp32: run the model under torch.autocast(dtype=torch.bfloat16)")
    # an A100 (compute capability 8.0): bf16 autocast, and TF32 at least
    path = tmp_path / "a100.json"
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": [
        {"id": 0, "name": "NVIDIA A100-SXM4-40GB", "computeMajor": 8, "computeMinor": 0}]}))
    a100 = advice_for(load(path), SGEMM)
    assert a100.path == "bf16_autocast" and a100.fix.endswith("At least allow TF32 (torch.set_float32_matmul_precision('high')).")


def test_no_known_faster_path_is_not_priced(tmp_path):
    advice = advice_for(load_events(tmp_path, step((BF16_GEMM, "aten::mm"))), BF16_GEMM)
    # bf16 already, and 3 GEMMs per iteration are not "thousands of tiny GEMMs"
    assert advice.path is None and advice.saved_us is None and advice.why_none == NO_PATH
    assert advice.fix.startswith("Most GPU time goes to this work")
