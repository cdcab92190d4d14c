"""report/diff/tables.py: the whole-trace tables of `diff`'s terminal report. Rows in their units with
their verdicts, `-` for the side a figure is missing on, a CPU-only pair without GPU tables, the
GPU pair's kernels (checked against the raw trace events) and device figures, optional columns
dropped on a narrow console."""
from __future__ import annotations

import gzip
import io
import json

import pytest

from goodhart_prof.report.common import SafeConsole
from goodhart_prof.report.diff.tables import render
from tests.support.diffs import BERT, MI250, gpu_comparison, phase_pair


def text(c, width: int = 100, top: int = 15) -> str:
    out = io.StringIO()
    render(c, SafeConsole(file=out, width=width, color_system=None), top)
    return out.getvalue()


def rows(out: str, first: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split("│")] for line in out.splitlines()
            if line.startswith(first + " ")]


def test_cpu_pair_phases_and_no_gpu_tables(tmp_path):
    out = text(phase_pair(tmp_path))
    assert "Sync points: none in either trace" in out
    # five 200 us `logging` annotations in B only; `rollout` 5 x 200 us on both sides
    assert rows(out, "logging") == [["logging", "-", "1.000 ms", "+1.000 ms", "new", "only in B"]]
    assert rows(out, "rollout") == [["rollout", "1.000 ms", "1.000 ms", "0.0 us", "1.00x", "within noise"]]
    for gpu_table in ("Kernel categories", "kernels (GPU time", "GPU devices", "Memory", "TFLOP/s"):
        assert gpu_table not in out


def test_narrow_console_drops_the_ratio_first(tmp_path):
    out = text(phase_pair(tmp_path), width=60)
    assert rows(out, "logging") == [["logging", "-", "1.000 ms", "+1.000 ms", "only in B"]]
    assert max(len(line) for line in out.splitlines()) <= 60


def raw(path, cat: str, part: str) -> tuple[int, float]:
    """Count and summed duration of the file's complete events of `cat` whose name holds `part`."""
    with gzip.open(path, "rt") as fh:
        durs = [e["dur"] for e in json.load(fh)["traceEvents"]
                if e.get("ph") == "X" and e.get("cat") == cat and part in e["name"]]
    return len(durs), sum(durs)


@pytest.fixture(scope="module")
def gpu_text():
    return text(gpu_comparison(), width=120, top=3)


def test_gpu_pair_kernels_match_the_raw_events(gpu_text):
    n, us = raw(BERT, "kernel", "cutlass_80_wmma_tensorop_bf16_s161616gemm")
    assert n == 17
    row = rows(gpu_text, "cutlass_80_wmma_tensorop…16_32x32_128x2_tn_align8")
    assert row == [["cutlass_80_wmma_tensorop…16_32x32_128x2_tn_align8", "-", f"{us:.1f} us", f"+{us:.1f} us",
                    "new", "only in B", "0", "17"]]
    n, us = raw(MI250, "gpu_memcpy", "Memcpy HtoD")
    assert rows(gpu_text, "Memcpy HtoD (Host -> Device)") == [[
        "Memcpy HtoD (Host -> Device)", f"{us:.1f} us", "-", f"-{us:.1f} us", "0.00x", "only in A", f"{n}", "0"]]
    assert f"Top 3 of {len(gpu_comparison().kernels)} kernels" in gpu_text


def test_gpu_pair_device_figures_and_memory_on_one_side(gpu_text):
    d = gpu_comparison().devices.iloc[0]
    assert d["label"] == "rank0/gpu2 vs rank0/gpu0"
    block = gpu_text[gpu_text.index("GPU devices (whole traces, not judged"):]
    figures = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:]]
               for line in block.splitlines()[3:8]}
    assert figures["utilization"] == [f"{100 * d['utilization_a']:.1f}%", f"{100 * d['utilization_b']:.1f}%",
                                      f"{100 * (d['utilization_b'] - d['utilization_a']):+.1f} pt"]
    assert figures["idle gaps"] == [f"{int(d['gap_count_a']):,}", f"{int(d['gap_count_b']):,}",
                                    f"{int(d['gap_count_b'] - d['gap_count_a']):+,}"]
    # the MI250 trace records no memory events: A's column is dashes
    memory = gpu_text[gpu_text.index("Memory (whole traces"):]
    assert rows(memory, "rank0/gpu0")[0][1:3] == ["peak allocated", "-"]
