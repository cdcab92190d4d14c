"""Issue 32, item 15: the exporter's promise, "reloading the export gives the same analysis", on
every multi-rank trace we have: the analysis JSON of the original and of its Chrome JSON export
reloaded are equal, less the fields that name the files or time the tool (and the rank source: a
merged document states its ranks by process names, the same ranks)."""
from __future__ import annotations

import json
import math

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.trace.merge import merge_rank_traces
from goodhart_prof.report.export.chrome_json import write_chrome_json
from goodhart_prof.report.json_report import to_document
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

MULTI_RANK = {
    "param dlrm 8 ranks (folder)": DATA / "param" / "dlrm_8rank",
    "hta sampled 128 ranks (folder of 2)": DATA / "hta" / "sampled_128rank",
    "ours cpu 2 ranks (merged file)": DATA / "ours" / "cpu_2rank_merged.json.gz",
}
# What names the input or times the tool, not a figure of the trace.
NOT_FIGURES = {("timing",), ("trace", "paths"), ("trace", "load"), ("trace", "rank_source")}


def _figures(doc, path=()):
    """The document as {path: value}, less NOT_FIGURES; floats rounded to 12 significant digits."""
    if any(path[:len(skip)] == skip for skip in NOT_FIGURES):
        return {}
    if isinstance(doc, dict):
        return {k: v for key, value in doc.items() for k, v in _figures(value, (*path, key)).items()}
    if isinstance(doc, list):
        return {k: v for i, value in enumerate(doc) for k, v in _figures(value, (*path, i)).items()}
    if isinstance(doc, float) and math.isfinite(doc):
        doc = float(f"{doc:.12g}")
    return {path: doc}


def _differences(a: dict, b: dict) -> list[str]:
    return [f"{'.'.join(map(str, k))}: {a.get(k)!r} -> {b.get(k)!r}"
            for k in sorted(set(a) | set(b), key=str) if a.get(k) != b.get(k)]


@pytest.mark.parametrize("name", list(MULTI_RANK))
def test_reloading_the_export_gives_the_same_analysis(tmp_path, name):
    original = analyze(load(MULTI_RANK[name]))
    out = tmp_path / "merged.json.gz"
    write_chrome_json(original, out)
    reloaded = analyze(load(out))
    assert reloaded.trace.ranks == original.trace.ranks
    assert reloaded.trace.world_size == original.trace.world_size
    assert reloaded.trace.device_properties == original.trace.device_properties
    before = _figures(json.loads(json.dumps(to_document(original), default=str)))
    after = _figures(json.loads(json.dumps(to_document(reloaded), default=str)))
    assert _differences(before, after) == []


def test_the_dlrm_export_keeps_its_devices_and_peaks(tmp_path):
    """The issue's figures: every device's name and peak, and every roofline row's percentage."""
    original = analyze(load(MULTI_RANK["param dlrm 8 ranks (folder)"]))
    out = tmp_path / "merged.json.gz"
    write_chrome_json(original, out)
    doc = to_document(analyze(load(out)))
    devices = doc["efficiency"]["devices"]
    assert len(devices) == 8 and {d["device_name"] for d in devices} == {"Tesla V100-SXM2-32GB"}
    rows = doc["efficiency"]["kernels"]
    assert rows and all(r["pct_roof"] is not None for r in rows if r.get("bound"))
    assert sum(r["pct_roof"] is not None for r in rows) == sum(
        r["pct_roof"] is not None for r in to_document(original)["efficiency"]["kernels"])


def test_the_runs_merged_trace_keeps_the_job_size(tmp_path):
    """merge.py (a run's merged_trace.json) writes the same header: world size and devices."""
    files = sorted((DATA / "param" / "dlrm_8rank").glob("*.json.gz"))
    out = tmp_path / "merged_trace.json"
    merge_rank_traces(dict(enumerate(files)), out)
    merged, folder = load(out), load(DATA / "param" / "dlrm_8rank")
    assert merged.world_size == folder.world_size == 8
    assert merged.device_properties == folder.device_properties
