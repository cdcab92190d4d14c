"""What torch.compile did (analysis/gpu/dynamo.py), on our compiled loop with a planted graph break
and recompile (tests/data/ours/compiled/graph_break, SOURCES.md) and on the H200 trace of our
compiled trainer; figures recounted from the raw events."""
from __future__ import annotations

import gzip
import json
import re

import pytest

from goodhart_prof.analysis.gpu.dynamo import compile_use
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

BREAK = DATA / "ours" / "compiled" / "graph_break"
H200 = DATA / "gpu" / "h200_2026-11-26" / "lite" / "clean"


def _raw(path):
    return [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X"]


def test_the_planted_break_and_recompile():
    use = compile_use(load(BREAK))
    assert use.iterations == 2
    rows = use.regions[["frame", "entry", "parent", "calls"]].values.tolist()
    assert rows == [[0, 0, -1, 1], [0, 1, -1, 1], [1, 0, 0, 1], [1, 1, 0, 1]]
    raw = {e["name"]: e["dur"] for e in _raw(BREAK / "rank-0.pt.trace.json.gz")
           if e["name"].startswith("Torch-Compiled Region")}
    assert use.regions["host_us"].tolist() == pytest.approx(
        [raw[f"Torch-Compiled Region: {f}/{e}"] for f, e in ((0, 0), (0, 1), (1, 0), (1, 1))])
    # the line comes from the resume function's name in the attribution iteration's stacks:
    # `s = y.sum().item()` is line 18 of graph_break_loop.py
    assert use.breaks == [{"frame": 1, "parent": 0, "calls": 2, "per_iteration": 1.0, "function": "update",
                           "file": "graph_break_loop.py", "line": 18}]
    lines = (DATA / "ours" / "compiled" / "graph_break_loop.py").read_text().splitlines()
    assert lines[17].strip() == "s = y.sum().item()"
    compiles = [e for e in _raw(BREAK / "rank-0.pt.trace.json.gz")
                if e["name"] == "_compile.compile_inner (dynamo_timed)"]
    assert [(c["iteration"], c["compile_id"]) for c in use.compiles] == [(4, "0/1"), (4, "1/1")]
    assert [c["seconds"] for c in use.compiles] == pytest.approx([c["dur"] / 1e6 for c in compiles])
    assert use.recompiled_frames == [0, 1]
    assert use.compiled_share is None  # a CPU trace: no GPU time to split
    assert use.regions["function"].tolist() == ["graph_break_loop.py(16): update"] * 2 + \
        ["graph_break_loop.py(18): torch_dynamo_resume_in_update_at_18"] * 2


def test_the_compiled_trainer_on_an_h200():
    use = compile_use(load(H200))
    raw = _raw(H200 / "rank-0.pt.trace.json.gz")
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in raw if e["name"].startswith("ProfilerStep#")]
    calls: dict[int, int] = {}
    for e in raw:
        m = re.match(r"^Torch-Compiled Region: (\d+)/0$", e["name"])
        if m and any(a <= e["ts"] <= b for a, b in steps):
            calls[int(m[1])] = calls.get(int(m[1]), 0) + 1
    assert dict(zip(use.regions["frame"], use.regions["calls"])) == calls == {0: 130, 1: 128, 2: 2, 3: 32}
    assert use.breaks == [] and use.compiles == [] and use.recompiled_frames == []
    assert use.compiled_gpu_us == pytest.approx(395162.949, abs=0.01)
    assert use.eager_gpu_us == pytest.approx(102004.579, abs=0.01)
    assert use.compiled_share == pytest.approx(0.7948, abs=1e-4)


def test_a_trace_without_torch_compile_has_none():
    assert compile_use(load(DATA / "ours" / "ab" / "clean_1")) is None


def test_xdit_flux_a_compiled_diffusion_model_on_an_mi300x():
    """TraceLens's xDiT FLUX.1 capture (tests/data/SOURCES.md): one compiled region, no break, no
    compilation in the trace; every GPU activity is either in a compiled graph's wrapper or eager."""
    path = DATA / "tracelens" / "xdit_flux_capture.json.gz"
    use = compile_use(load(path))
    raw = _raw(path)
    assert sum(e["name"].startswith("Torch-Compiled Region") for e in raw) == 1
    assert use.regions[["frame", "entry", "calls"]].values.tolist() == [[0, 0, 1]]
    assert use.breaks == [] and use.compiles == []
    gpu_us = sum(e["dur"] for e in raw if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert use.compiled_gpu_us + use.eager_gpu_us == pytest.approx(gpu_us, abs=0.01)
    assert use.compiled_share == pytest.approx(0.5544, abs=1e-4)


def test_resume_site_says_function_file_and_line_or_nothing():
    from goodhart_prof.analysis.gpu.dynamo import resume_site
    b = {"frame": 2, "parent": 1, "function": "update", "file": "loop.py", "line": 18}
    assert resume_site(b) == "update at loop.py:18"
    assert resume_site({**b, "function": None, "file": None, "line": None}) is None
