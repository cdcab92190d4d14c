"""GPU utilization within the steps' bounds (issue 31 item 7): host work before a step's first
kernel counts as idle, on real traces where it differs from first-to-last activity."""
from __future__ import annotations


import numpy as np
import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.gpu.device_time import gpu_time
from goodhart_prof.analysis.intervals import merge_intervals
from goodhart_prof.analysis.host.links import gpu_launches
from goodhart_prof.analysis.tree import profiler_steps
from goodhart_prof.trace.load import load
from tests.support.paths import DATA



def busy_inside(trace, lo: float, hi: float) -> float:
    """The union of the GPU activity clipped to [lo, hi], computed afresh."""
    g = trace.gpu
    s, e = np.clip(g["ts"].to_numpy(float), lo, hi), np.clip(g["end"].to_numpy(float), lo, hi)
    bs, be = merge_intervals(s[e > s], e[e > s])
    return float((be - bs).sum())


@pytest.fixture(scope="module")
def owl():
    """OWLv2 inference on an H100: one ProfilerStep#N whose DataLoader resizes images on the host
    for 128.5 ms before the first kernel."""
    return analyze(load(DATA / "tracelens" / "h100_owlv2_inference.json.gz", progress=False))


def test_step_bounds_count_the_host_work_before_the_first_kernel(owl):
    trace = owl.trace
    (row,) = gpu_time(trace).to_dict("records")
    # the first-to-last figures stay TraceLens's (gpu_timeline.csv beside the trace)
    assert row["busy_us"] == pytest.approx(566_759.473, abs=1e-3)
    assert row["span_us"] == pytest.approx(1_078_288.379, abs=1e-3)
    (step,) = profiler_steps(trace.events).to_dict("records")
    links = gpu_launches(trace)
    launched = links[(links["launch_ts"] >= step["ts"]) & (links["launch_ts"] <= step["end"])]
    end = max(step["end"], float(launched["end"].max()))
    assert row["step_span_us"] == pytest.approx(end - step["ts"])
    assert row["step_busy_us"] == pytest.approx(busy_inside(trace, step["ts"], end))
    assert row["step_idle_us"] == pytest.approx(row["step_span_us"] - row["step_busy_us"])
    lead = row["first_ts"] - step["ts"]
    assert 128_000 < lead < 129_000  # the preprocessing before any kernel: idle within the step
    assert row["step_utilization"] == pytest.approx(0.4679, abs=1e-4)
    assert row["utilization"] == pytest.approx(0.5256, abs=1e-4)


def test_low_utilization_judges_within_the_steps_and_names_the_lead_in(owl):
    (f,) = [f for f in owl.findings if f.rule == "low_utilization"]
    assert f.evidence["utilization"] == pytest.approx(0.4679, abs=1e-4)
    assert f.evidence["span_utilization"] == pytest.approx(0.5256, abs=1e-4)
    assert f.evidence["bounds"].startswith("the steps")
    assert f.title.startswith("GPU idle 53% of its steps: the host is in DataLoader.__next__")
    # the DataLoader's idle time holds the lead-in: more than all the gaps between busy stretches
    (b,) = owl.burstiness
    assert b.idle_causes[0]["idle_us"] > b.gaps["total_us"]


def test_without_steps_the_span_is_judged():
    trace = load(DATA / "tracelens" / "vllm_decode_full_graph.json.gz", progress=False)
    g = gpu_time(trace)
    assert g["step_utilization"].isna().all() and g["step_span_us"].isna().all()


def test_six_steps_back_to_back(tmp_path):
    """ResNet-50 (2021): six ProfilerStep#N back to back; 69 ms of the first step run before its
    first kernel, so utilization within the steps is 56.6%, not 60.6%."""
    trace = load(DATA / "kineto" / "resnet50_v100_2021.pt.trace.json.gz", progress=False)
    (row,) = gpu_time(trace).to_dict("records")
    steps = profiler_steps(trace.events)
    lo, hi = float(steps["ts"].min()), max(float(steps["end"].max()), row["last_end"])
    assert row["step_span_us"] == pytest.approx(hi - lo)
    assert row["step_busy_us"] == pytest.approx(busy_inside(trace, lo, hi)) == pytest.approx(row["busy_us"])
    assert row["utilization"] == pytest.approx(0.6057, abs=1e-4)
    assert row["step_utilization"] == pytest.approx(0.5664, abs=1e-4)
