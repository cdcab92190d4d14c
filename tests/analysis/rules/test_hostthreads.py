"""slow_tiny_ops (analysis/rules/hostthreads.py) on loops recorded the way users write them
(tests/data/ours/user_loops, SOURCES.md): CleanRL's PPO on a 4-env CartPole, whose policy makes
4x2 logits. With two intra-op threads on the 2-core machine while two other processes were busy,
the 4x2 softmax took ~15 ms per call; the same loop with one thread makes no finding. The figures
are recomputed here from the trace's own tables."""
from __future__ import annotations


import numpy as np
import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules.hostthreads import SLOW_TINY_OPS, _numels
from goodhart_prof.analysis.tree import host_tree
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

LOOPS = DATA / "ours" / "user_loops"


@pytest.fixture(scope="module")
def busy():
    return analyze(load(LOOPS / "ppo_2threads_busy", progress=False))


def _finding(a, rule="slow_tiny_ops"):
    return next((f for f in a.findings if f.rule == rule), None)


def test_two_threads_on_a_busy_machine_fire(busy):
    f = _finding(busy)
    assert f is not None
    ops = {(o["op"], o["shape"]): o for o in f.evidence["ops"]}
    # the case: the 4x2 softmax of the policy, once per step of the 8-step rollout, 2
    # traced iterations; every call slow. Sized by its recorded dims where the loader keeps them
    # for every op, else by its own allocation (8 floats out: 32 B)
    soft = ops.get(("aten::_softmax", "4x2")) or ops[("aten::_softmax", "output 32 B")]
    tree = host_tree(busy.trace)
    names = tree.names[tree.name].astype(str)
    durs = tree.self_us[names == "aten::_softmax"]
    assert soft["calls"] == 16 and soft["per_iteration"] == 8.0
    assert soft["median_us"] >= 5000  # tens of ms a call; one thread: tens of us
    assert durs.max() >= soft["median_us"]
    addmm = ops[("aten::addmm", "64, 4x64, 64x64")]  # a recorded shape: 4x64 @ 64x64
    assert addmm["calls"] == 34 and addmm["median_us"] > SLOW_TINY_OPS.limit("slow_us")
    assert f.title.startswith("host ops on tiny inputs take far longer than their size warrants: ")
    assert "torch.set_num_threads(1)" in f.fix and "OMP_NUM_THREADS=1" in f.fix
    # the saving: each slow call's time above 20 us, per iteration (2 traced iterations)
    assert f.evidence["excess_us"] / 2 == pytest.approx(f.est_saving_us, rel=1e-6)
    assert f.severity == "high"


def test_one_thread_is_silent():
    a = analyze(load(LOOPS / "ppo_1thread", progress=False))
    assert _finding(a) is None
    assert "slow_tiny_ops" not in {n.rule for n in a.not_judged}
    # the same 4x2 softmax ran in microseconds
    tree = host_tree(a.trace)
    names = tree.names[tree.name].astype(str)
    assert float(np.median(tree.self_us[names == "aten::_softmax"])) < 100


def test_not_judged_without_sizes_silent_on_gpu_ranks():
    lite = analyze(load(DATA / "ours" / "cpu_item_logging_lite.json.gz", progress=False))
    why = {n.rule: n.reason for n in lite.not_judged}["slow_tiny_ops"]
    assert "record_shapes" in why and "profile_memory" in why
    assert why.endswith("(record with goodhart-prof run --mode full)")  # how this one was recorded
    hooks = analyze(load(LOOPS / "grad_accum", progress=False))  # our hooks, lite mode
    assert "PROF_MODE=full" in {n.rule: n.reason for n in hooks.not_judged}["slow_tiny_ops"]
    # a GPU rank: its host ops' times are dispatch; judged, nothing to find
    gpu = analyze(load(DATA / "hta" / "mi250_minitoy_rocm.json.gz", progress=False))
    assert "slow_tiny_ops" not in {n.rule for n in gpu.not_judged} | {f.rule for f in gpu.findings}


def test_numels():
    assert _numels("8x64, 64x64, , ") == [512, 4096]
    assert _numels("64, 4x64, 64x64, , ") == [64, 256, 4096]
    assert _numels(", , ") is None  # scalars only
    assert _numels("?, 4x4") is None  # a tensor list: size unknown
