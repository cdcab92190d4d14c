"""report/text/critical_path.py: the terminal report's critical path section. HTA's simple_add
trace (no iterations: the whole trace; host-bound; its 16 host-to-device copies on the path, their
time summed from the raw events), a GPU-bound graph replay without segments table, the note for a
rank with GPU work but no path, and nothing for a CPU-only trace."""
from __future__ import annotations

import gzip
import io
import json

from rich.console import Console

from goodhart_prof.report.text.critical_path import render_critical_path
from tests.support.analyses import analysis_of
from tests.support.paths import DATA

SIMPLE_ADD = "hta/critical_path_simple_add.json.gz"


def text(a, width: int = 120) -> list[str]:
    out = io.StringIO()
    render_critical_path(a, Console(file=out, width=width, color_system=None))
    return out.getvalue().splitlines()


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("│")]


def test_whole_trace_path_host_bound_with_its_copies():
    a = analysis_of(SIMPLE_ADD)
    it = a.critical_path.shown
    lines = text(a)
    assert lines[1].startswith("Critical path (rank 0, the whole trace: no iterations found): ")
    assert f"{it.length_us / 1e6:.3f} s of a {(it.end - it.ts) / 1e6:.3f} s window" in lines[1]
    assert "host 99.9%" in lines[2] and "host-bound" in " ".join(lines[2:4])
    with gzip.open(DATA / SIMPLE_ADD, "rt") as fh:
        copies = [e["dur"] for e in json.load(fh)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy"]
    row = cells(next(x for x in lines if x.startswith("Memcpy HtoD (Pageable -> Device)")))
    assert row[1:3] == ["gpu", f"{sum(copies) / 1e3:.3f} ms"] and row[4] == str(len(copies)) == "16"
    segments = next(x for x in lines if x.startswith("Segments ("))
    assert segments.startswith(f"Segments (10 longest of {len(it.segments)}, in time order)")


def test_gpu_bound_replay_names_kernels_short():
    lines = text(analysis_of("tracelens/vllm_decode_full_graph.json.gz"))
    assert lines[2].rstrip().endswith("GPU-bound") and "host 0.0%" in lines[2]
    sides = {cells(x)[1] for x in lines if "│" in x and not x.startswith("name")}
    assert sides == {"gpu"}
    assert not any(x.startswith("Segments (") for x in lines)  # one segment: no table


def test_a_rank_without_a_path_says_why():
    lines = text(analysis_of("hta/mi250_minitoy_rocm.json.gz"))
    assert lines == ["", "Critical path (rank 0): no host work in the window"]


def test_cpu_only_trace_prints_nothing():
    assert text(analysis_of("ours/cpu_2rank_merged.json.gz")) == []
