"""The terminal report's CUPTI counters section (report/text/cupti_section.py)."""
from __future__ import annotations

from rich.console import Console

from goodhart_prof.analysis.facade import analyze
from goodhart_prof.report.text.cupti_section import cupti_section
from goodhart_prof.trace.load import load
from tests.support.paths import DATA


def test_the_section_on_hta_s_a100_trace():
    console = Console(width=100, record=True, file=open("/dev/null", "w"))
    cupti_section(analyze(load(DATA / "hta" / "cupti_counters_a100.json.gz")), console)
    text = console.export_text()
    lines = text.splitlines()
    assert lines[1].startswith("CUPTI counters: 77 kernel ranges, 9 counters (smsp__sass_thread_inst_executed_op_: ")
    assert "fp32 79.68 GFLOP, fp16 0.55 GFLOP" in " ".join(text.split())
    assert any(line.startswith("aten::cudnn_convolution") and line.rstrip().endswith("49.13") for line in lines)
    assert max(len(line) for line in lines) <= 100
    # two fft2d_r2c_32x32 kernels that differ in their template arguments print apart
    fft = [line for line in lines if "fft2d_r2c_32x32" in line]
    assert len(fft) == 2 and fft[0] != fft[1]
