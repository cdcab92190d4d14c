"""Memory rules (analysis/rules/memory.py) on hand-made `[memory]` events: the caching allocator
holding far more than the peak allocated (high where it is a large share of the device), memory
that grows every iteration (named by the phase and op that keep it), and allocation churn per ms."""
from __future__ import annotations

import json

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules import BY_ID
from goodhart_prof.trace.load import load
from tests.support.events import ann, load_events, memory_event, op

MB, GB = 10**6, 10**9


def _steps(n, dur=10_000.0):
    return [ann(f"ProfilerStep#{i}", i * dur, dur - 1) for i in range(n)]


def _seed_report_events():
    """"142 MB allocated, 12 GB reserved": a cache left by an earlier, larger phase."""
    events = _steps(3) + [op("aten::mm", 100 + 10_000 * i, 50) for i in range(3)]
    events += [memory_event(110 + 10_000 * i, 142 * MB, 142 * MB, 12 * GB, addr=i) for i in range(3)]
    events += [memory_event(140 + 10_000 * i, -142 * MB, 0, 12 * GB, addr=i) for i in range(3)]
    return events


def test_allocator_waste_fires_on_the_seed_report(tmp_path):
    events = _seed_report_events()
    a = analyze(load_events(tmp_path, events))
    f = {x.rule: x for x in a.findings}["allocator_waste"]
    assert f.evidence["reserved_ratio"] == pytest.approx(12 * GB / (142 * MB), rel=1e-3)
    assert "expandable_segments:True" in f.fix and "empty_cache() is not the fix" in f.fix
    limit = BY_ID["allocator_waste"].limit("ratio")
    events = [e if e["ph"] != "i" else dict(e, args=dict(e["args"], **{"Total Reserved": limit * 0.99 * 142 * MB}))
              for e in events]
    assert "allocator_waste" not in {x.rule for x in analyze(load_events(tmp_path, events, "b.json")).findings}


def test_allocator_waste_is_high_on_a_quarter_of_the_device(tmp_path):
    path = tmp_path / "props.json"
    path.write_text(json.dumps({"traceEvents": _seed_report_events(),
                                "deviceProperties": [{"id": 0, "name": "GPU", "totalGlobalMem": 16 * GB}]}))
    f = {x.rule: x for x in analyze(load(path)).findings}["allocator_waste"]
    # 12 GB reserved - 142 MB allocated at the peak = 11.858 GB unused: 74% of a 16 GB device
    assert f.evidence["cached_bytes"] == 12 * GB - 142 * MB
    assert f.evidence["device_memory"] == 16 * GB
    assert f.evidence["cached_share_of_device"] == round((12 * GB - 142 * MB) / (16 * GB), 4)
    assert f.severity == "high"


def _growing(tmp_path, n_steps, per_step, name):
    events = _steps(n_steps)
    for i in range(n_steps):
        events += [ann("gae", 10_000 * i + 100, 500), op("aten::relu", 10_000 * i + 200, 50),
                   memory_event(10_000 * i + 210, per_step, per_step * (i + 1), 0, device=-1,
                                device_type=0, addr=1000 + i)]
    return analyze(load_events(tmp_path, events, name))


def test_memory_growth_needs_iterations_and_names_the_phase(tmp_path):
    two = _growing(tmp_path, 2, 1 * MB, "two.json")
    assert "memory_growth" in {n.rule for n in two.not_judged}
    three = _growing(tmp_path, 3, 1 * MB, "three.json")
    f = {x.rule: x for x in three.findings}["memory_growth"]
    assert f.evidence["growth_per_iteration"] == 1 * MB
    assert f.evidence["kept_by"][0]["phase"] == "gae" and f.evidence["kept_by"][0]["op"] == "aten::relu"
    assert f.evidence["kept_by"][0]["live_bytes"] == 3 * MB
    small = _growing(tmp_path, 4, int(BY_ID["memory_growth"].limit("per_iteration_bytes")) - 1, "small.json")
    assert "memory_growth" not in {x.rule for x in small.findings}


def test_alloc_churn_counts_allocations_per_ms(tmp_path):
    per_ms = BY_ID["alloc_churn"].limit("per_ms")
    n = int(2 * per_ms)  # allocations in each 1 ms iteration: twice the threshold ...
    n = max(n, int(BY_ID["alloc_churn"].limit("per_iteration")))  # ... and enough per iteration
    events = _steps(2, dur=n / (2 * per_ms) * 1000)
    dur = events[0]["dur"] + 1
    for i in range(2):
        events.append(ann("env_step", i * dur + 1, dur - 3))
        events += [memory_event(i * dur + 2 + k * (dur - 4) / n, 64, 64, 0, device=-1, device_type=0, addr=k)
                   for k in range(n)]
    a = analyze(load_events(tmp_path, events))
    f = {x.rule: x for x in a.findings}["alloc_churn"]
    assert f.evidence["allocations_per_iteration"] == n
    assert f.evidence["allocations_per_ms"] == pytest.approx(2 * per_ms, rel=0.01)
    assert f.evidence["sites"][0]["phase"] == "env_step"
