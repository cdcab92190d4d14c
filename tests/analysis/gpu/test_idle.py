"""Why the GPU idles (analysis/gpu/idle.py): each idle gap split by what the launching host thread was
doing, summed per cause. Hand-made traces worked out by hand, the OWLv2 trace's data-loader
stall, and every trace in shared/traces (top cause per GPU printed)."""
from __future__ import annotations

import json
import math

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.gpu.burstiness import burstiness
from goodhart_prof.analysis.gpu.idle import UNTRACED
from goodhart_prof.analysis.rules.utilization import idle_fix
from goodhart_prof.report.json_report import burstiness_json
from goodhart_prof.trace.load import load
from tests.support.helpers import covered, idle_split, read_trace
from tests.support.paths import DATA

# Copies of the real traces of ../shared/traces (tests/data/SOURCES.md), same relative paths.
SHARED = DATA
OWL = DATA / "tracelens" / "h100_owlv2_inference.json.gz"
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def kernel(ts, dur, corr, launch=None, tid=100):
    out = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr}}]
    if launch is not None:
        out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100,
                    "tid": tid, "ts": launch, "dur": 2, "args": {"correlation": corr}})
    return out


def host(name, ts, dur, tid=100, cat="user_annotation"):
    return [{"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur}]


def frame(name, ts, dur, pid_id, parent=-1, tid=100):
    return [{"ph": "X", "cat": "python_function", "name": name, "pid": 100, "tid": tid, "ts": ts,
             "dur": dur, "args": {"Python id": pid_id, "Python parent id": parent}}]


def causes_of(tmp_path, *parts):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [e for p in parts for e in p]}))
    (b,) = burstiness(load(path))
    return {c["cause"]: c for c in b.idle_causes}, b


def test_nested_annotations_innermost_wins_and_profiler_step_is_excluded(tmp_path):
    # gap [10, 100): outer 10..20 and 50..95, inner 20..30 and 40..50, aten::item 30..40,
    # only ProfilerStep 95..100 -> not traced; and inside the step [-10, 200] before the first
    # kernel (-10..0) and after the last (110..200): only ProfilerStep there -> not traced
    causes, b = causes_of(
        tmp_path, kernel(0, 10, 1, launch=-5), kernel(100, 10, 2, launch=96),
        host("ProfilerStep#1", -10, 210), host("outer", 5, 90), host("inner", 20, 30),
        host("aten::item", 30, 10, cat="cpu_op"))
    assert {k: c["idle_us"] for k, c in causes.items()} == {
        "outer": 55, "inner": 20, "aten::item": 10, UNTRACED: 5 + 10 + 90}
    assert [c["cause"] for c in b.idle_causes] == [UNTRACED, "outer", "inner", "aten::item"]
    assert math.isclose(sum(c["share"] for c in b.idle_causes), 1.0)
    assert causes["outer"]["share"] == pytest.approx(55 / 190)
    assert burstiness_json(b)["idle_causes"][1] == {"cause": "outer", "idle_us": 55.0,
                                             "share": pytest.approx(55 / 190), "frame": None}


def test_the_launching_thread_is_read_not_a_busy_side_thread(tmp_path):
    # tid 200 (a logger) spans the whole gap; tid 100 launched the next kernel: its view counts
    causes, _ = causes_of(
        tmp_path, kernel(0, 10, 1, launch=-5), kernel(100, 10, 2, launch=95),
        host("logger", 0, 200, tid=200), host("data", 10, 80))
    assert {k: c["idle_us"] for k, c in causes.items()} == {"data": 80, UNTRACED: 10}


def test_unknown_launch_falls_back_to_the_main_thread(tmp_path):
    # the second gap's opener has no launch in the trace: the thread that launched most reads it
    causes, _ = causes_of(
        tmp_path, kernel(0, 10, 1, launch=-5), kernel(50, 10, 2, launch=45),
        kernel(100, 10, 3), host("step", 10, 35), host("wait", 60, 40), host("side", 0, 200, tid=200))
    assert {k: c["idle_us"] for k, c in causes.items()} == {"step": 35, UNTRACED: 5, "wait": 40}


def test_uncovered_gap_and_gpu_only_trace_are_not_traced(tmp_path):
    causes, _ = causes_of(tmp_path, kernel(0, 10, 1, launch=-5), kernel(30, 10, 2, launch=25))
    assert list(causes) == [UNTRACED] and causes[UNTRACED]["idle_us"] == 20
    causes, _ = causes_of(tmp_path, kernel(0, 10, 1), kernel(30, 10, 2))
    assert list(causes) == [UNTRACED] and causes[UNTRACED]["share"] == 1.0


def test_python_frames_refine_a_cause_and_fill_where_no_event_is(tmp_path):
    # gap [10, 100): annotation 10..60 holds frame load() 20..60; frame train() 0..200 is outer
    causes, _ = causes_of(
        tmp_path, kernel(0, 10, 1, launch=-5), kernel(100, 10, 2, launch=96),
        frame("train.py(1): train", 0, 200, 1), frame("data.py(9): load", 20, 40, 2, parent=1),
        host("batch", 10, 50))
    assert causes["batch"]["idle_us"] == 50 and causes["batch"]["frame"] == "data.py(9): load"
    assert causes["train.py(1): train"]["idle_us"] == 40  # 60..100: no op or annotation


def test_no_gaps_no_causes(tmp_path):
    causes, b = causes_of(tmp_path, kernel(0, 10, 1, launch=-5), kernel(10, 10, 2, launch=-4))
    assert b.idle_causes == [] and burstiness_json(b)["idle_causes"] == []


def runtime(name, ts, dur, tid=100, cat="cuda_runtime"):
    return [{"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur,
             "args": {"correlation": -1}}]


def test_a_runtime_call_in_the_gap_is_the_cause_with_its_op_as_context(tmp_path):
    # gap [10, 1000): conv backward 5..995 calls cudaFree 20..920 (after a launch: a real free)
    events = (kernel(0, 10, 1, launch=-5), kernel(1000, 10, 2, launch=995),
              host("aten::convolution_backward", 5, 990, cat="cpu_op"), runtime("cudaFree", 20, 900))
    causes, b = causes_of(tmp_path, *events)
    assert {k: c["idle_us"] for k, c in causes.items()} == {
        "cudaFree": 900, "aten::convolution_backward": 85, UNTRACED: 5}
    assert causes["cudaFree"]["kind"] == "free"
    assert causes["cudaFree"]["context"] == "aten::convolution_backward"
    assert "kind" not in causes["aten::convolution_backward"]
    assert burstiness_json(b)["idle_causes"][0] == {
        "cause": "cudaFree", "idle_us": 900.0, "share": pytest.approx(900 / 990), "frame": None,
        "kind": "free", "context": "aten::convolution_backward"}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [e for p in events for e in p]}))
    (f,) = [f for f in analyze(load(path)).findings if f.rule == "low_utilization"]
    assert "the host is in cudaFree (called from aten::convolution_backward) (91% of idle time)" in f.title
    assert "caching allocator" in f.fix and "launching thread" not in f.fix


def test_runtime_call_kinds(tmp_path):
    # a cudaFree before any launch of the process creates the context; a 2 ms launch loads code;
    # a 500 us launch is an ordinary launch (its op keeps the time); malloc and sync by name
    causes, _ = causes_of(
        tmp_path, runtime("cudaFree", -3000, 2000), kernel(0, 10, 1, launch=-500),
        kernel(5000, 10, 2, launch=4990), host("aten::add_", 100, 4800, cat="cpu_op"),
        runtime("cudaLaunchKernel", 200, 2000), runtime("cudaLaunchKernel", 2300, 500),
        runtime("cudaMalloc", 3000, 300), runtime("cuModuleLoadData", 3400, 100, cat="cuda_driver"),
        runtime("cudaStreamSynchronize", 3600, 200))
    got = {k: (c["idle_us"], c.get("kind"), c.get("context")) for k, c in causes.items()}
    assert got == {"cudaLaunchKernel": (2000, "launch", "aten::add_"),
                   "aten::add_": (4800 - 2000 - 300 - 100 - 200, None, None),
                   "cudaMalloc": (300, "alloc", "aten::add_"),
                   "cudaStreamSynchronize": (200, "sync", "aten::add_"),
                   "cuModuleLoadData": (100, "module", "aten::add_"), UNTRACED: (90 + 100, None, None)}
    assert "warm-up" in idle_fix("cudaLaunchKernel", kind="launch")
    assert "warm-up" in idle_fix("cuModuleLoadData", kind="module")
    assert "warm-up" in idle_fix("cudaFree", kind="context") and "context" in idle_fix("cudaFree", kind="context")
    assert "caching allocator" in idle_fix("cudaMalloc", kind="alloc")
    assert "read-back" in idle_fix("cudaStreamSynchronize", kind="sync")


def test_first_cuda_free_is_context_creation(tmp_path):
    # the first kernel's launch is not in the trace; the cudaFree under "setup" comes before the
    # process's first launch (2990): it creates the context, a warm-up's job
    causes, _ = causes_of(
        tmp_path, kernel(0, 10, 1), kernel(3000, 10, 2, launch=2990), host("setup", 50, 2900),
        runtime("cudaFree", 100, 2500))
    assert causes["cudaFree"]["idle_us"] == 2500 and causes["cudaFree"]["kind"] == "context"
    assert causes["cudaFree"]["context"] == "setup" and causes["setup"]["idle_us"] == 400


# ---- real traces -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def owl():
    return analyze(load(OWL))


@pytest.fixture(scope="module")
def owl_raw() -> dict:
    """The OWLv2 idle split by tests/support/helpers.py's plain pass over the raw JSON (GPU activities
    merged by hand; gaps, and the step's time before the first activity and after the last, cut at
    the launching thread's host events, each piece to the innermost one), and the share of the
    step the GPU idles (the step from its host start to its end: the GPU ends inside it)."""
    events = read_trace(OWL)["traceEvents"]
    (step,) = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
               if e.get("cat") == "user_annotation" and str(e["name"]).startswith("ProfilerStep#")]
    split = idle_split(events, [step])
    assert split["busy"][-1][1] < step[1]
    busy = covered(split["busy"], *step)
    return {**split, "step_idle": 1 - busy / (step[1] - step[0])}


def test_owlv2_idles_in_the_data_loader(owl, owl_raw):
    (b,) = owl.burstiness
    top = b.idle_causes[0]
    # the program's split against the plain pass: same definition, so equal but for the order
    # the float sums run in (1 ns)
    assert top["cause"] == DATALOADER
    assert sum(c["idle_us"] for c in b.idle_causes) == pytest.approx(owl_raw["idle_us"], abs=1e-3)
    for c in b.idle_causes[:4]:  # the DataLoader, aten::copy_, cudaStreamSynchronize, aten::addmm
        assert c["idle_us"] == pytest.approx(owl_raw["causes"][c["cause"]], abs=1e-3), c["cause"]
    dataloader = owl_raw["causes"][DATALOADER] / owl_raw["idle_us"]
    assert top["share"] == pytest.approx(dataloader, abs=1e-9) and dataloader > 0.95
    assert top["frame"] == "scipy/ndimage/_interpolation.py(739): zoom"  # the resize inside it
    assert math.isclose(sum(c["share"] for c in b.idle_causes), 1.0)
    (f,) = [f for f in owl.findings if f.rule == "low_utilization"]
    # within the step: 128.5 ms of the DataLoader before the first kernel count as idle too
    assert f.title == (f"GPU idle {owl_raw['step_idle']:.0%} of its steps: the host is in "
                       f"DataLoader.__next__ ({dataloader:.0%} of idle time)")
    assert f.title == "GPU idle 53% of its steps: the host is in DataLoader.__next__ (96% of idle time)"
    assert f.evidence["idle_causes"][0]["cause"] == DATALOADER
    assert len(f.evidence["idle_causes"]) == 3
    for word in ("num_workers", "persistent_workers", "prefetch_factor", "pin_memory", "non_blocking"):
        assert word in f.fix


def test_reports_show_the_causes(owl, owl_raw):
    from goodhart_prof.report.html.page import render_html
    from rich.console import Console

    from goodhart_prof.report.json_report import to_document
    from goodhart_prof.report.text.report import render
    page = render_html(owl)
    assert "Why the GPU idles" in page and f"<code>{DATALOADER}</code>" in page
    assert "scipy/ndimage/_interpolation.py(739): zoom" in page
    console = Console(record=True, width=200)
    render(owl, console)
    text = console.export_text()
    share = owl_raw["causes"][DATALOADER] / owl_raw["idle_us"]
    assert f"{share:.1%}" == "95.5%"  # the share the table prints, from the plain pass
    assert "Why the GPU idles" in text and DATALOADER in text and f"{share:.1%}" in text
    doc = to_document(owl)
    assert doc["burstiness"]["rank0/gpu0"]["idle_causes"][0]["cause"] == DATALOADER


SHARED_TRACES = sorted(p for p in SHARED.rglob("*.json.gz")  # per-rank files of the folders included
                       if "ours" not in p.relative_to(SHARED).parts)  # ours: not a shared trace


@pytest.mark.skipif(not SHARED.exists(), reason="shared/traces not present")
def test_top_idle_cause_per_gpu_on_real_traces(capsys):
    rows = []
    for path in SHARED_TRACES:
        if not path.exists():
            continue
        for b in burstiness(load(path, progress=False)):
            if not b.idle_causes:
                continue
            assert math.isclose(sum(c["share"] for c in b.idle_causes), 1.0, rel_tol=1e-9)
            assert all(c["cause"] and c["idle_us"] >= 0 for c in b.idle_causes)
            shares = [c["share"] for c in b.idle_causes if c["cause"] != "(other)"]
            assert shares == sorted(shares, reverse=True)
            top = b.idle_causes[0]
            rows.append((str(path.relative_to(SHARED)), f"rank {b.rank} / gpu {b.device}",
                         top["cause"], top["share"]))
    assert rows
    with capsys.disabled():
        print("\n| trace | device | top idle cause | share |\n| --- | --- | --- | --- |")
        for trace, dev, cause, share in rows:
            print(f"| {trace} | {dev} | `{cause}` | {100 * share:.0f}% |")


def test_long_first_launch_and_sync_copy_are_named_on_real_traces():
    # MI250 toy: one 6.5 ms hipLaunchKernel (a first launch loading code) under aten::add_ held
    # 75% of the idle time, which used to be blamed on aten::add_
    a = analyze(load(DATA / "hta" / "mi250_minitoy_rocm.json.gz", progress=False))
    top = a.burstiness[0].idle_causes[0]
    assert (top["cause"], top["kind"], top["context"]) == ("hipLaunchKernel", "launch", "aten::add_")
    # (71% of the idle time within the steps: 75% of the gaps between busy stretches)
    assert top["idle_us"] == pytest.approx(6543.109, abs=1e-3) and top["share"] == pytest.approx(0.7121, abs=1e-4)
    (f,) = [f for f in a.findings if f.rule == "low_utilization"]
    assert f.title == ("GPU idle 98% of its steps: the host is in hipLaunchKernel (called from aten::add_) "
                       "(71% of idle time)")
    assert "warm-up" in f.fix
    # SGLang: a 493 ms synchronous hipMemcpyWithStream under aten::copy_
    (b,) = burstiness(load(DATA / "tracelens" / "sglang_qwen3_8b_prefilldecode.json.gz", progress=False))
    top = b.idle_causes[0]
    assert (top["cause"], top["kind"], top["context"]) == ("hipMemcpyWithStream", "sync", "aten::copy_")
    assert top["idle_us"] == pytest.approx(493260.183, abs=1e-3)
    # MI300 ResNet: a hipDeviceSynchronize called from Python (no op open) is the second cause:
    # torch.profiler's own stop_trace, as its kept frame (trace.model.KEPT_TORCH_FRAMES) shows,
    # not the user's ddp_worker that called prof.stop()
    (b,) = burstiness(load(DATA / "tracelens" / "mi300_resnet_act_checkpoint_train.json.gz", progress=False))
    sync = [c for c in b.idle_causes if c["cause"] == "hipDeviceSynchronize"][0]
    assert sync["kind"] == "sync" and sync["context"] == "torch/profiler/profiler.py(235): stop_trace"
    assert sync["idle_us"] == pytest.approx(107.396, abs=1e-3)
    assert "the profiler's, not the loop's" in idle_fix(sync["cause"], None, sync["kind"], sync["context"])
    assert "remove the read-back" in idle_fix(sync["cause"], None, sync["kind"], "train_ddp.py(161): ddp_worker")
