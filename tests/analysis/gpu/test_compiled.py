"""Code torch.compile generated (analysis/gpu/compiled.py): generated files and graph annotations
said readably, and where each compiled graph is called from (the user's function, the compiled
region, the phase) on a hand-made trace."""
from __future__ import annotations

from goodhart_prof.analysis.gpu.compiled import (BACKWARD, display_name, frame_label, graph_label,
                                                 graph_sources)
from tests.support.events import X, ann, load_events, op

ACT = "## Call CompiledFxGraph fi36ptu7hclw7ptqgi5zqowpt3rd6stxowv3c4gow2kzhgolg4g5 ##"
STEP = "## Call CompiledFxGraph f4qcacf6d75w7w4metufjonr54moxtfiou6bricntzvwovexl4wy ##"
CACHE_FRAME = ("/tmp/goodhart-acceptance/cache/inductor/ed/"
               "cedsdeukyofswthbmjbu2dsr4jth2jopbyxv35etppx26fgj4dbg.py(1124): call")


def test_generated_files_and_names_are_said_readably():
    assert frame_label(CACHE_FRAME) == "inductor code cedsdeuk.py(1124): call"
    assert frame_label("trainer/env.py(247): step") == "trainer/env.py(247): step"
    assert frame_label(None) is None
    assert graph_label(STEP) == "compiled graph f4qcacf6 (inductor code)"
    assert graph_label(STEP, "env_step") == "compiled graph f4qcacf6 (inductor code, in env_step)"
    assert graph_label("env_step") is None and display_name("env_step") == "env_step"
    assert display_name(ACT) == "compiled graph fi36ptu7 (inductor code)"


def frame(name, ts, dur, python_id, parent=-1, tid=100):
    return X(name, "python_function", ts, dur, tid=tid, **{"Python id": python_id, "Python parent id": parent})


def test_graph_sources_name_the_function_region_and_phase(tmp_path):
    events = [
        ann("rollout", 0, 1000),
        op("Torch-Compiled Region: 0/0", 10, 500),
        frame("trainer/train.py(88): act_all", 12, 480, 1),
        frame("torch/_dynamo/eval_frame.py(600): _fn", 14, 470, 2, parent=1),
        ann(ACT, 20, 100), ann(ACT, 200, 100),      # called twice from the one place
        # a backward graph on the autograd thread: no frame, no phase around it
        op(BACKWARD, 600, 200, tid=200), ann(STEP, 610, 100, tid=200),
    ]
    got = graph_sources(load_events(tmp_path, events))
    assert got == {
        ACT: {"function": "trainer/train.py(88): act_all", "region": "Torch-Compiled Region: 0/0",
              "phase": "rollout", "calls": 2},
        STEP: {"function": None, "region": BACKWARD, "phase": None, "calls": 1}}


def test_no_graph_annotation_no_sources(tmp_path):
    assert graph_sources(load_events(tmp_path, [ann("rollout", 0, 100), op("aten::mm", 10, 20)])) == {}
