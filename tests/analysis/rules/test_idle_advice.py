"""What to change when the GPU idles (analysis/rules/idle_advice.py): the fix follows the cause
(a runtime call by its kind, else the host code), a title's short cause, and compiled-graph causes
made one where together they lead."""
from __future__ import annotations

import pytest

from goodhart_prof.analysis.gpu.compiled import BACKWARD
from goodhart_prof.analysis.gpu.idle import UNTRACED
from goodhart_prof.analysis.rules.idle_advice import (PROFILER_SYNC, RUNTIME_FIXES, compiled_first,
                                                      compiled_fix, idle_fix, short_cause, with_frame)

DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def test_fix_follows_the_cause():
    assert "num_workers" in idle_fix(DATALOADER) and "pin_memory" in idle_fix(DATALOADER)
    assert "read-back" in idle_fix("aten::item") and "read-back" in idle_fix("cudaStreamSynchronize")
    assert "read-back" in idle_fix("aten::to") and "read-back" in idle_fix("aten::copy_")
    assert "fused" in idle_fix("Optimizer.step#AdamW.step")
    assert "every N steps" in idle_fix("logging")
    assert "num_workers" in idle_fix("pipeline", frame="torch/utils/data/_utils/collate.py(1): collate")
    assert "aten::log_softmax" in idle_fix("aten::log_softmax")  # generic, names the cause
    assert "with_stack" in idle_fix(UNTRACED)
    assert short_cause(DATALOADER) == "DataLoader.__next__"


def test_runtime_kinds_and_the_profilers_own_sync():
    assert idle_fix("cudaMalloc", kind="alloc") == RUNTIME_FIXES["alloc"]
    assert idle_fix("aten::item", kind="free") == RUNTIME_FIXES["free"]  # the kind wins over the name
    assert idle_fix("cudaDeviceSynchronize", kind="sync",
                    context="torch/profiler/profiler.py(700): step") == PROFILER_SYNC
    assert "read-back" in idle_fix("cudaDeviceSynchronize", kind="sync", context="train.py(3): main")
    # workers exist already: the advice is that they fall behind, not to add them from none
    assert "although the DataLoader has worker processes" in idle_fix(
        "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__")


def test_the_optimizer_advice_names_the_optimizer_of_the_cause():
    assert "torch.optim.SGD's fused" in idle_fix("Optimizer.step#SGD.step")
    assert "the optimizer's fused" in idle_fix("optimizer.zero_grad")  # no class said: no guess


def test_short_cause_and_with_frame():
    long = "x" * 61
    assert short_cause(long) == "x" * 57 + "..." and short_cause("x" * 60) == "x" * 60
    assert with_frame("Fix it.", "train.py(3): main") == "Fix it. Most of that idle time is in train.py(3): main."
    assert with_frame("Fix it.", None) == "Fix it."
    assert "for act (train.py), update" in compiled_fix(["act (train.py)", "update"])


GRAPH = "## Call CompiledFxGraph f4qcacf6d75w7w4metufjonr54moxtfiou6bricntzvwovexl4wy ##"


def test_compiled_causes_become_one_when_together_they_lead():
    step = {"cause": GRAPH, "idle_us": 30.0, "share": 0.3, "frame": None,
            "compiled": {"graph": GRAPH, "function": "trainer/train.py(88): act_all"}}
    back = {"cause": "b", "idle_us": 20.0, "share": 0.2, "frame": None,
            "compiled": {"graph": GRAPH, "region": BACKWARD}}
    data = {"cause": DATALOADER, "idle_us": 40.0, "share": 0.4, "frame": None}
    first, rest = compiled_first([data, step, back])[0], compiled_first([data, step, back])[1:]
    assert first["cause"] == "torch.compile'd code (act_all (trainer/train.py), a backward graph)"
    assert (first["idle_us"], first["share"]) == (50.0, pytest.approx(0.5))
    assert first["group"]["graphs"] == ["compiled graph f4qcacf6 (inductor code)"] * 2
    assert rest == [data]
    # together 0.5 < a lone cause's 0.6: left as they were
    bigger = dict(data, share=0.6)
    assert compiled_first([bigger, step, back]) == [bigger, step, back]
    assert compiled_first([data]) == [data]
