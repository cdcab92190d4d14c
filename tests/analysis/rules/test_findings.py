"""Findings fire on evidence, stay quiet without it: hand-built traces and real ones."""
from __future__ import annotations


import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules import BY_ID

ITEM_PER_ITERATION = BY_ID["item_logging"].limit("per_iteration")
LAUNCH_MEDIAN_US = BY_ID["tiny_batch"].limit("median_kernel_us")
SCATTER_SHARE = BY_ID["dominant_scatter_gather"].limit("share")
from goodhart_prof.trace.load import load
from tests.support.events import ann, cuda_item, kernel, load_events, memcpy, op, rt
from tests.support.paths import DATA

SHARED = DATA  # copies of ../shared/traces (tests/data/SOURCES.md)


def rules(trace) -> dict[str, object]:
    return {f.rule: f for f in analyze(trace).findings}


def test_item_logging_fires_per_step_and_not_once_per_iteration(tmp_path):
    per_step = []
    for it in range(2):
        base = it * 10_000
        per_step.append(ann(f"ProfilerStep#{it}", base, 9_000))
        for k in range(3):  # three .item() per iteration: a per-step read-back
            per_step += cuda_item(base + 100 + 1000 * k, 10 * (it * 3 + k) + 1)
    found = rules(load_events(tmp_path, per_step, "many.json"))
    assert "item_logging" in found
    ev = found["item_logging"].evidence
    assert ev["count"] == 6 and ev["per_iteration"] == 3.0 >= ITEM_PER_ITERATION
    once = []
    for it in range(2):
        once.append(ann(f"ProfilerStep#{it}", it * 10_000, 9_000))
        once += cuda_item(it * 10_000 + 100, it + 1)  # metrics moved once per iteration: fine
    assert "item_logging" not in rules(load_events(tmp_path, once, "once.json"))


def test_nan_checks_fire_on_nonzero(tmp_path):
    events = [ann("ProfilerStep#3", 0, 5000)]
    for k in range(2):
        t = 100 + 1000 * k
        events += [op("aten::index", t, 300), op("aten::nonzero", t + 10, 200),
                   rt("cudaMemcpyAsync", t + 20, 20, 50 + k), rt("cudaStreamSynchronize", t + 50, 100, 60 + k),
                   memcpy("Memcpy DtoH (Device -> Pageable)", t + 60, 5, 50 + k)]
    found = rules(load_events(tmp_path, events))
    assert found["nan_checks"].evidence["count"] == 2
    assert "aten::nonzero" in found["nan_checks"].evidence["sites"][0]["site"]


def test_tiny_batch_launch_bound_and_dominant_scatter_gather(tmp_path):
    events, t = [ann("ProfilerStep#1", 0, 200_000)], 10.0
    for i in range(300):  # tiny kernels with launch gaps: GPU mostly idle
        name = "void at::native::index_elementwise_kernel<128, 4>" if i % 2 else "elementwise_kernel"
        events += [rt("cudaLaunchKernel", t, 5, i), kernel(name, t + 6, 3, i)]
        t += 20
    found = rules(load_events(tmp_path, events))
    assert found["tiny_batch"].evidence["median_kernel_us"] < LAUNCH_MEDIAN_US
    assert found["tiny_batch"].evidence["utilization"] < 0.5
    assert found["dominant_scatter_gather"].evidence["share"] >= SCATTER_SHARE
    assert "low_utilization" in found


def test_busy_gpu_with_big_kernels_has_no_gpu_findings(tmp_path):
    events, t = [ann("ProfilerStep#1", 0, 100_000)], 0.0
    for i in range(120):
        events += [rt("cudaLaunchKernel", t, 5, i), kernel("ampere_bf16_s16816gemm_128x128", t + 6, 500, i)]
        t += 501
    found = rules(load_events(tmp_path, events))
    assert not set(found) & {"tiny_batch", "low_utilization", "no_amp", "dominant_scatter_gather",
                             "item_logging", "nan_checks", "pageable_htod"}, found


def test_real_traces_fire_what_they_show():
    v100 = rules(load(DATA / "hta" / "v100_ddp_rank1.json.gz"))
    assert "no_amp" in v100  # volta_sgemm: fp32 GEMMs
    assert v100["no_amp"].evidence["low_precision_us"] == 0
    assert "low_utilization" in v100 and v100["low_utilization"].evidence["utilization"] < 0.6
    assert "item_logging" not in v100 and "nan_checks" not in v100
    owl = rules(load(DATA / "tracelens" / "h100_owlv2_inference.json.gz"))
    assert owl["pageable_htod"].evidence["count"] == 25
    assert "no_amp" not in owl  # bf16 cutlass/xmma GEMMs


def test_resnet_2021_pageable_copies():
    path = SHARED / "kineto" / "resnet50_v100_2021.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} not present (shared traces live beside the repository)")
    found = rules(load(path))
    assert found["pageable_htod"].evidence["count"] == 12
    assert found["pageable_htod"].evidence["per_iteration"] == 2.0
