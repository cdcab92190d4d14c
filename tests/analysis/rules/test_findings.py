"""Findings fire on evidence, stay quiet without it, across rule families: a busy GPU fires
no GPU finding, and real traces fire what they show. Each rule family's own tests are at
tests/analysis/rules/test_<family module>.py."""
from __future__ import annotations

from goodhart_prof.analysis import analyze
from goodhart_prof.trace.load import load
from tests.support.events import ann, kernel, load_events, rt
from tests.support.paths import DATA


def rules(trace) -> dict[str, object]:
    return {f.rule: f for f in analyze(trace).findings}


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
