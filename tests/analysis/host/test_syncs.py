"""Sync points: kinds, folding, sites and iterations on hand-built, recorded and shared traces."""
from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from goodhart_prof.analysis.host.syncs import KINDS, sync_points, sync_summary
from goodhart_prof.report.json_report import syncs_json
from goodhart_prof.trace.load import load
from tests.support.events import GPU_PID, STREAM, X, ann, cuda_item, kernel, load_events, memcpy, op, rt
from tests.support.paths import DATA

SHARED = DATA  # copies of ../shared/traces (tests/data/SOURCES.md)

def kinds(points) -> dict[str, int]:
    return dict(Counter(points["kind"]))


def test_cuda_item_is_one_sync_point(tmp_path):
    trace = load_events(tmp_path, [ann("ProfilerStep#7", 0, 1000)] + cuda_item(100, 5))
    points = sync_points(trace)
    assert kinds(points) == {"item": 1}
    p = points.iloc[0]
    assert (p.ts, p.dur, p.site, p.iteration) == (100, 50, "aten::item", 7)
    assert trace.events.loc[p.row, "name"] == "aten::item"


def test_if_tensor_is_one_is_nonzero(tmp_path):
    # torch records `if t:` as aten::is_nonzero > aten::item > aten::_local_scalar_dense.
    events = [op("aten::is_nonzero", 100, 60)] + cuda_item(102, 5)
    points = sync_points(load_events(tmp_path, events))
    assert kinds(points) == {"is_nonzero": 1}
    assert points.iloc[0].site == "aten::is_nonzero" and points.iloc[0].dur == 60


def test_mask_index_is_one_nonzero_with_chain_site(tmp_path):
    events = [ann("ProfilerStep#51", 0, 1000), ann("rollout", 10, 900), ann("policy_act", 20, 500),
              op("aten::index", 100, 80), op("aten::nonzero", 102, 70),
              rt("cudaLaunchKernel", 105, 5, 11), kernel("nonzero_kernel", 112, 3, 11),
              rt("cudaMemcpyAsync", 115, 5, 12), memcpy("Memcpy DtoH (Device -> Pinned)", 120, 1, 12),
              rt("cudaStreamSynchronize", 125, 40, 13)]
    points = sync_points(load_events(tmp_path, events))
    assert kinds(points) == {"nonzero": 1}
    assert points.iloc[0].site == "rollout > policy_act > aten::index > aten::nonzero"
    assert points.iloc[0].iteration == 51


def test_runtime_syncs_and_copies(tmp_path):
    events = [
        rt("cudaDeviceSynchronize", 10, 30, 1),
        # .to("cuda") from pageable memory: the copy and its stream sync are one point.
        op("aten::to", 100, 60), op("aten::_to_copy", 101, 58), op("aten::copy_", 102, 56),
        rt("cudaMemcpyAsync", 105, 20, 2), memcpy("Memcpy HtoD (Pageable -> Device)", 110, 10, 2),
        rt("cudaStreamSynchronize", 130, 20, 3),
        # .cpu(): likewise one memcpy_dtoh.
        op("aten::copy_", 200, 50), rt("cudaMemcpyAsync", 205, 10, 4),
        memcpy("Memcpy DtoH (Device -> Pageable)", 210, 5, 4), rt("cudaStreamSynchronize", 220, 20, 5),
        rt("cudaEventSynchronize", 300, 10, 6),
        rt("cudaMemcpy", 400, 10, 7), memcpy("Memcpy HtoD (Pinned -> Device)", 402, 3, 7),
        rt("cudaMemcpyAsync", 500, 5, 8), memcpy("Memcpy HtoD (Pinned -> Device)", 502, 1, 8),
        rt("cudaStreamSynchronize", 600, 10, 9),
        X("Stream Wait Event", "cuda_sync", 700, 5, pid=GPU_PID, tid=STREAM, correlation=10),
    ]
    points = sync_points(load_events(tmp_path, events))
    assert kinds(points) == {"device_sync": 1, "memcpy_htod_pageable": 1, "memcpy_dtoh": 1,
                             "event_sync": 1, "sync_memcpy": 1, "stream_sync": 1}
    by_kind = dict(zip(points["kind"], points["site"]))
    assert by_kind["device_sync"] == "cudaDeviceSynchronize"
    assert by_kind["memcpy_htod_pageable"] == "aten::to > aten::_to_copy > aten::copy_ > cudaMemcpyAsync"
    assert by_kind["memcpy_dtoh"] == "aten::copy_ > cudaMemcpyAsync"
    assert (points["iteration"] == -1).all()
    assert points.loc[points["kind"] == "memcpy_dtoh", "dur"].item() == 10  # the launch call's


def test_hip_names(tmp_path):
    events = [rt("hipDeviceSynchronize", 10, 5, 1), rt("hipStreamSynchronize", 20, 5, 2),
              rt("hipEventSynchronize", 30, 5, 3), rt("hipMemcpyWithStream", 40, 5, 4),
              rt("hipMemcpy", 50, 5, 5), rt("hipMemcpyAsync", 60, 5, 6)]
    assert kinds(sync_points(load_events(tmp_path, events))) == {
        "device_sync": 1, "stream_sync": 1, "event_sync": 1, "sync_memcpy": 2}


def test_cpu_item_on_a_gpu_rank_does_not_wait(tmp_path):
    # An optimizer's CPU step counter: aten::item with no runtime call inside.
    events = cuda_item(100, 5) + [op("aten::item", 300, 5), op("aten::_local_scalar_dense", 301, 3)]
    assert kinds(sync_points(load_events(tmp_path, events))) == {"item": 1}
    # On a CPU-only trace the same op counts: it is where a GPU run would wait.
    cpu_only = [op("aten::item", 300, 5), op("aten::_local_scalar_dense", 301, 3),
                op("aten::_local_scalar_dense", 400, 2)]
    assert kinds(sync_points(load_events(tmp_path, cpu_only, "cpu.json"))) == {"item": 2}


def test_cuda_sync_events_fold_into_their_calls(tmp_path):
    events = [rt("cudaDeviceSynchronize", 10, 30, 1),
              X("Context Sync", "cuda_sync", 10, 30, pid=GPU_PID, tid=-1, correlation=1),
              # A call we do not know by name, named a stream sync by its cuda_sync event.
              rt("cudaStreamQueryAndWait", 100, 20, 2),
              X("Stream Sync", "cuda_sync", 100, 20, pid=GPU_PID, tid=STREAM, correlation=2),
              # A sync event whose call is not in the trace still counts, without a host site.
              X("Event Sync", "cuda_sync", 200, 20, pid=GPU_PID, tid=STREAM, correlation=99)]
    points = sync_points(load_events(tmp_path, events))
    assert kinds(points) == {"device_sync": 1, "stream_sync": 1, "event_sync": 1}
    lone = points[points["kind"] == "event_sync"].iloc[0]
    assert lone.site == "Event Sync (no host call)" and lone.pid == -1


def test_python_site_skips_library_frames(tmp_path):
    py = lambda name, ts, dur, i, parent: X(name, "python_function", ts, dur,  # noqa: E731
                                            **{"Python id": i, "Python parent id": parent})
    events = [ann("ProfilerStep#8", 0, 2000),
              py("threading.py(1000): run", 0, 2000, 1, None),
              py("train.py(42): step", 10, 1900, 2, 1),
              py("torch/utils/_device.py(103): __torch_function__", 90, 80, 3, 2),
              py("<built-in method item of Tensor object at 0x7f00>", 95, 70, 4, 3),
              *cuda_item(100, 5),
              # A sync with only library frames around it falls back to the op chain.
              py("torch/cuda/__init__.py(975): synchronize", 2100, 50, 5, None),
              py("<built-in function _cuda_synchronize>", 2101, 40, 6, 5),
              rt("cudaDeviceSynchronize", 2105, 30, 20)]
    points = sync_points(load_events(tmp_path, events))
    # train.py is not on this machine: the function is named, no line claimed (analysis/host/line_sites.py)
    assert list(points["site"]) == ["in function step (train.py, frame line 42)", "cudaDeviceSynchronize"]
    assert list(points["iteration"]) == [8, -1]


def test_iterations_come_from_any_thread_of_the_rank(tmp_path):
    events = [ann("ProfilerStep#7", 0, 1000), ann("ProfilerStep#8", 1000, 1000)]
    events += cuda_item(100, 5) + [dict(e, tid=200) if e["pid"] == 100 else e
                                   for e in cuda_item(1500, 50)]
    points = sync_points(load_events(tmp_path, events))
    assert list(points["iteration"]) == [7, 8] and list(points["tid"]) == [100, 200]


def test_summary_and_json(tmp_path):
    events = ([ann("ProfilerStep#7", 0, 1000), ann("ProfilerStep#8", 1000, 1000)]
              + cuda_item(100, 5) + cuda_item(300, 10) + cuda_item(1100, 15)
              + [rt("cudaDeviceSynchronize", 2500, 30, 40)])
    summary = sync_summary(sync_points(load_events(tmp_path, events)))
    assert summary.total == 4
    assert summary.by_kind == {**{k: 0 for k in KINDS}, "item": 3, "device_sync": 1}
    assert summary.sites.iloc[0].to_dict() == {"kind": "item", "site": "aten::item", "count": 3,
                                               "total_us": 150.0, "background": False}
    doc = syncs_json(summary)
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc
    assert set(doc) == {"total", "by_kind", "sites", "per_iteration"}
    assert [(d["iteration"], d["count"], d["by_kind"]["item"]) for d in doc["per_iteration"]] == [
        (-1, 1, 0), (7, 2, 2), (8, 1, 1)]
    assert all(type(d["count"]) is int and type(d["total_us"]) is float for d in doc["sites"])


def test_empty_trace(tmp_path):
    points = sync_points(load_events(tmp_path, [op("aten::add", 0, 5)]))
    assert points.empty and list(points.columns) == ["rank", "pid", "tid", "ts", "dur", "kind",
                                                     "site", "iteration", "row", "background"]
    assert syncs_json(sync_summary(points)) == {"total": 0, "by_kind": {k: 0 for k in KINDS},
                                              "sites": [], "per_iteration": []}


# -- a trace recorded here -------------------------------------------------------------------------
def _three_items(x):
    return x.sum().item() + x.max().item() + x.min().item()


def _mask_index(x, mask):
    return x[mask]


def test_recorded_cpu_trace(tmp_path):
    x = torch.randn(64)
    mask = x > 0
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        for step in (3, 4):
            with record_function(f"ProfilerStep#{step}"):
                _three_items(x)
                _mask_index(x, mask)
    prof.export_chrome_trace(str(tmp_path / "rec.json"))
    points = sync_points(load(tmp_path / "rec.json"))
    assert kinds(points) == {"item": 6, "nonzero": 2}
    per_it = Counter(zip(points["iteration"], points["kind"]))
    assert per_it == {(3, "item"): 3, (3, "nonzero"): 1, (4, "item"): 3, (4, "nonzero"): 1}
    # Kineto names a frame by its function's first line; this file, recorded by a name relative to
    # the current directory (the checkout), is read and each read placed on the line of its call:
    # the line after each function's `def`.
    here = "tests/analysis/host/test_syncs.py"
    items_at = f"{here}:{_three_items.__code__.co_firstlineno + 1} _three_items"
    mask_at = f"{here}:{_mask_index.__code__.co_firstlineno + 1} _mask_index"
    sites = Counter(zip(points["kind"], points["site"]))
    assert len(sites) == 2, sites
    for (kind, site), n in sites.items():
        assert site.endswith(items_at if kind == "item" else mask_at), site
        assert n == (6 if kind == "item" else 2)


# -- shared traces, checked against a count by plain loops -----------------------------------------
def _raw_events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]


CAT = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Memcpy": "gpu_memcpy"}
OPS = {"aten::item": "item", "aten::_local_scalar_dense": "item", "aten::nonzero": "nonzero",
       "aten::is_nonzero": "is_nonzero"}
CALLS = {"cudaStreamSynchronize": "stream_sync", "hipStreamSynchronize": "stream_sync",
         "cudaDeviceSynchronize": "device_sync", "hipDeviceSynchronize": "device_sync",
         "cudaEventSynchronize": "event_sync", "hipEventSynchronize": "event_sync",
         "cudaMemcpy": "sync_memcpy", "hipMemcpy": "sync_memcpy", "hipMemcpyWithStream": "sync_memcpy"}


def hand_count(path: Path) -> Counter:
    """The folding rules, written again as naive loops over the raw JSON."""
    evs = _raw_events(path)
    for e in evs:
        e["cat"] = CAT.get(e.get("cat"), e.get("cat"))
        e["end"] = e["ts"] + e.get("dur", 0)

    def thread(e):
        return e["pid"], e["tid"]

    def within(a, b):
        return thread(a) == thread(b) and b["ts"] <= a["ts"] and a["end"] <= b["end"]

    cpu_ops = [e for e in evs if e["cat"] == "cpu_op"]
    calls = [e for e in evs if e["cat"] == "cuda_runtime"]
    counted = []
    cands = [e for e in cpu_ops if e["name"] in OPS]
    for c in cands:
        if any(o is not c and within(c, o) for o in cands):
            continue
        if calls and not any(thread(r) == thread(c) and c["ts"] <= r["ts"] <= c["end"]
                             for r in calls):
            continue
        counted.append((OPS[c["name"]], c))

    def in_op(e):
        return any(within(e, c) for _, c in counted)

    def innermost_op(e):
        holders = [o for o in cpu_ops if within(e, o)]
        return id(max(holders, key=lambda o: o["ts"])) if holders else None

    by_corr = {e["args"]["correlation"]: e for e in calls if "correlation" in e.get("args", {})}
    copy_calls = []
    for m in (e for e in evs if e["cat"] == "gpu_memcpy"):
        kind = ("memcpy_dtoh" if "DtoH" in m["name"] else "memcpy_htod_pageable"
                if m["name"].startswith("Memcpy HtoD (Pageable") else None)
        call = by_corr.get(m["args"].get("correlation"))
        if kind and call is not None and not in_op(call):
            copy_calls.append(call)
            counted.append((kind, call))
    copy_ops = {innermost_op(c) for c in copy_calls} - {None}
    for r in calls:
        if r["name"] in CALLS and not in_op(r) and not any(r is c for c in copy_calls) \
                and innermost_op(r) not in copy_ops:
            counted.append((CALLS[r["name"]], r))
    return Counter(kind for kind, _ in counted)


def _shared(name: str) -> Path:
    for base in (DATA, SHARED):
        if (base / name).exists():
            return base / name
    pytest.skip(f"{name} not found in tests/data or ../shared/traces")


@pytest.mark.parametrize("name, expected", [
    ("hta/mi250_minitoy_rocm.json.gz", {"sync_memcpy": 2, "device_sync": 1}),
    ("hta/v100_ddp_rank1.json.gz", {"device_sync": 1}),
    ("kineto/resnet50_v100_2021.pt.trace.json.gz", {"memcpy_htod_pageable": 12, "device_sync": 1}),
])
def test_shared_traces_match_a_count_by_hand(name, expected):
    path = _shared(name)
    trace = load(path)
    points = sync_points(trace)
    assert kinds(points) == expected
    assert dict(hand_count(path)) == expected
    assert (points["dur"] >= 0).all() and np.isfinite(points["ts"]).all()
    assert points["site"].str.len().gt(0).all()
    steps = {int(n.split("#")[1]) for n in trace.events["name"].astype(str).unique()
             if n.startswith("ProfilerStep#")}
    assert set(points["iteration"]) <= steps | {-1}
    summary = syncs_json(sync_summary(points))
    assert summary["total"] == sum(expected.values())
    assert json.loads(json.dumps(summary, allow_nan=False)) == summary


def test_resnet_copies_happen_twice_per_iteration():
    points = sync_points(load(_shared("kineto/resnet50_v100_2021.pt.trace.json.gz")))
    copies = points[points["kind"] == "memcpy_htod_pageable"]
    assert Counter(copies["iteration"]) == {i: 2 for i in range(5, 11)}
    assert set(copies["site"]) == {"aten::to > aten::copy_ > cudaMemcpyAsync"}
