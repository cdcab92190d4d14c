"""Graph capture (analysis/gpu/graph_capture.py): launches made while a stream captures run no kernel, so
the GPU idles through a capture; the utilization rules do not judge that idle time (not
judged, saying why). tiny_batch needs launch gaps to be most of the idle time: a GPU that waits
on one blocking copy is not launch-bound (the SGLang decode trace)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.gpu.graph_capture import capture_windows, captured_us
from goodhart_prof.trace.load import load
from tests.support.paths import DATA, ROOT

SHARED = ROOT.parent / "shared" / "traces"


def kernel(ts, dur, corr, launch):
    return [{"ph": "X", "cat": "kernel", "name": "void k<128>()", "pid": 0, "tid": 7, "ts": ts, "dur": dur,
             "args": {"device": 0, "stream": 7, "correlation": corr}},
            {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 100, "tid": 100,
             "ts": launch, "dur": 2, "args": {"correlation": corr}}]


def call(name, ts, dur, corr=-1):
    return [{"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": dur,
             "args": {"correlation": corr}}]


def capture_trace(tmp_path, captures: int) -> Path:
    """Warm-up kernels (each 5 us, 20 us apart), then `captures` captures of 10 ms each in which
    the host launches 200 times (captured: no kernel), then a last kernel."""
    events, corr, t = [], 0, 0.0
    for _ in range(150):
        corr += 1
        events += kernel(t + 3, 5, corr, t)
        t += 20
    for _ in range(captures):
        events += call("hipStreamBeginCapture", t, 2)
        for j in range(200):
            corr += 1
            events += call("hipLaunchKernel", t + 10 + 40 * j, 2, corr)
        events += call("hipStreamEndCapture", t + 9_980, 10)
        t += 10_000
    corr += 1
    events += kernel(t + 3, 5, corr, t)
    path = tmp_path / "capture.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_idle_time_that_is_graph_capture_is_not_judged(tmp_path):
    trace = load(capture_trace(tmp_path, 3))
    (starts, ends), = capture_windows(trace).values()
    assert starts.tolist() == [3000.0, 13000.0, 23000.0] and ends.tolist() == [12990.0, 22990.0, 32990.0]
    assert captured_us(trace, 0, 0, 40_000) == 29_970 and captured_us(trace, 0, 12_000, 14_000) == 1_990
    a = analyze(trace)
    fired = {f.rule for f in a.findings}
    assert not {"low_utilization", "tiny_batch"} & fired
    why = {n.rule: n.reason for n in a.not_judged}
    assert why["low_utilization"].startswith("the trace records CUDA/HIP graph capture (3 capture(s) "
                                             "covering 30.0 ms of the GPU's ")
    assert "trace the replays instead" in why["tiny_batch"]


def test_without_capture_the_same_idle_gpu_is_judged(tmp_path):
    """The same timeline with the capture calls renamed (plain launches into a stalled stream):
    low_utilization fires."""
    path = capture_trace(tmp_path, 3)
    text = path.read_text().replace("hipStreamBeginCapture", "hipStreamQuery").replace(
        "hipStreamEndCapture", "hipStreamQuery")
    path.write_text(text)
    a = analyze(load(path))
    assert "low_utilization" in {f.rule for f in a.findings}
    assert not capture_windows(a.trace)


def test_a_gpu_waiting_on_one_blocking_copy_is_not_launch_bound():
    """SGLang decode (MI300X): 555 tiny kernels from one graph replay, GPU busy 2% because of one
    463 ms hipMemcpyWithStream: low_utilization names the copy, tiny_batch stays silent."""
    a = analyze(load(DATA / "tracelens" / "sglang_qwen3_8b_decode.json.gz"))
    by_rule = {f.rule: f for f in a.findings}
    assert "tiny_batch" not in by_rule
    assert "hipMemcpyWithStream" in by_rule["low_utilization"].title
    (b,) = a.burstiness
    short = float(b.gap_dur[b.gap_dur < 100].sum())
    assert short / float(b.gap_dur.sum()) < 0.5  # the launch gaps are a sliver of the idle time


@pytest.mark.skipif(not (SHARED / "tracelens" / "vllm_piecewise_graph_capture.json.gz").exists(),
                    reason="shared traces not present (they live beside the repository)")
def test_vllm_piecewise_capture_is_not_judged_for_utilization():
    a = analyze(load(SHARED / "tracelens" / "vllm_piecewise_graph_capture.json.gz"))
    assert "low_utilization" not in {f.rule for f in a.findings}
    why = {n.rule: n.reason for n in a.not_judged}["low_utilization"]
    assert why.startswith("the trace records CUDA/HIP graph capture (25 capture(s)")
