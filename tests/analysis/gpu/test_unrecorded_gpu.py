"""A GPU run whose GPU activity was not recorded (launch calls, listed GPUs, no kernel events) is
not called CPU-only, and no FLOP rate is computed from the host's dispatch time of its ops
(analysis/gpu_time.unrecorded_gpu, analysis/efficiency._timed, report/text/report.py)."""
from __future__ import annotations

import gzip
import io
import json
import re
from pathlib import Path

from rich.console import Console

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.gpu.device_time import unrecorded_gpu
from goodhart_prof.report.text.report import render
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

BERT = DATA / "tracelens" / "h100_bert_small_inference.json.gz"
CPU = DATA / "ours" / "cpu_flops_ops.json.gz"
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "ac2g"}


def without_gpu_events(src: Path, dst: Path) -> dict:
    """The real trace with its GPU-side events dropped (launch calls and deviceProperties kept),
    as CUPTI's activity being off leaves it; returns the raw document."""
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in GPU_CATS]
    dst.write_text(json.dumps(doc))
    return doc


def text_of(a) -> str:
    buf = io.StringIO()
    render(a, Console(file=buf, width=400, color_system=None))
    return buf.getvalue()


def test_launches_without_kernels_say_unrecorded_not_cpu_only(tmp_path):
    doc = without_gpu_events(BERT, tmp_path / "nokernels.json")
    names = [e["name"] for e in doc["traceEvents"]
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "Launch" in e.get("name", "")]
    launches = len(names)
    assert launches == 60 and names.count("cudaLaunchKernel") == 34  # the rest cuLaunchKernel(Ex)
    a = analyze(load(tmp_path / "nokernels.json"))
    assert a.gpu.empty
    missing = unrecorded_gpu(a.trace)
    assert missing is not None and missing.launches == launches and missing.listed == 1
    assert missing.names == ("NVIDIA H100 80GB HBM3",)
    out = text_of(a)
    assert "a CPU-only run?" not in out and "a CPU-only trace" not in out and "CPU-only rank" not in out
    assert "Not a CPU-only run" in out
    assert "GPU activity was not recorded: the host made 60 kernel launch call(s)" in out
    assert "ProfilerActivity.CUDA" in out
    # no rate from host dispatch time: the original trace has GEMM rates, this one none
    assert not analyze(load(BERT)).efficiency.ops.empty
    eff = a.efficiency
    assert eff.ops.empty and len(eff.instances) == 0 and eff.kernels.empty
    assert not re.search(r"TFLOP/s", out)
    assert "no rates: the ops ran on a GPU whose activity was not recorded" in out
    # rules that need GPU activity say why without calling it CPU-only
    reasons = {n.rule: n.reason for n in a.not_judged}
    assert reasons["low_utilization"] == reasons["dominant_kernel"]
    assert "CUDA activity was off" in reasons["low_utilization"]
    assert reasons["low_utilization"].endswith("not a CPU-only run")


def test_listed_gpus_only_is_not_called_cpu_only(tmp_path):
    doc = without_gpu_events(BERT, tmp_path / "listed.json")
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if e.get("cat") not in ("cuda_runtime", "cuda_driver")
                          and e.get("name") != "[memory]"]
    (tmp_path / "listed.json").write_text(json.dumps(doc))
    a = analyze(load(tmp_path / "listed.json"))
    missing = unrecorded_gpu(a.trace)
    assert missing is not None and missing.launches == 0 and not missing.gpu_memory and not missing.ranks
    assert "GPU activity was not recorded: the trace lists 1 GPU(s)" in text_of(a)


def test_cpu_only_trace_keeps_its_wording_and_rates():
    a = analyze(load(CPU))
    assert unrecorded_gpu(a.trace) is None
    assert "a CPU-only run?" in text_of(a)
    assert not a.efficiency.ops.empty and (a.efficiency.ops["device"] == -1).all()


def test_sync_section_and_sync_findings_agree(tmp_path):
    """A report whose sync section says none carries no sync finding: the sync rules count the
    same points the report lists (sync points plus host reads)."""
    without_gpu_events(BERT, tmp_path / "nokernels.json")
    for path in (tmp_path / "nokernels.json", CPU, DATA / "ours" / "cpu_item_logging_lite.json.gz"):
        a = analyze(load(path))
        listed = a.syncs.total + (a.reads.total if a.reads is not None else 0)
        out = text_of(a)
        sync_findings = [f for f in a.findings if f.rule in
                         ("item_logging", "sync_grad_clip", "nan_checks", "branchy_value_head")]
        if "Sync points: none" in out:
            assert listed == 0 and not sync_findings
        for f in sync_findings:
            assert 0 < f.evidence["count"] <= listed
