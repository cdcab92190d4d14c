"""The terminal report's torch.compile section (report/text/compile_section.py) on the planted loop."""
from __future__ import annotations

from rich.console import Console

from goodhart_prof.analysis.facade import analyze
from goodhart_prof.report.text.compile_section import compile_section
from goodhart_prof.trace.load import load
from tests.support.paths import DATA


def _text(path, width=100):
    console = Console(width=width, record=True, file=open("/dev/null", "w"))
    compile_section(analyze(load(path)), console)
    return console.export_text()


def test_the_section_says_the_break_the_compiles_and_the_regions():
    lines = _text(DATA / "ours" / "compiled" / "graph_break").splitlines()
    assert lines[1] == "torch.compile (2 traced iterations): 4 compiled region calls in 2 dynamo frames"
    assert lines[2] == ("  graph break: frame 1 resumes update at graph_break_loop.py:18, inside frame 0 "
                        "(1.0 per iteration)")
    assert lines[3].startswith("  compiled inside the traced iterations: 2 times, 1.96 s (iteration 4: 0/1 1.10 s")
    assert "recompiled frames (a cache entry above 0 ran): 0, 1" in "\n".join(lines)
    assert any("1/1" in line and "frame 0" in line and "146.0 us" in line for line in lines)
    assert max(len(line) for line in lines) <= 100


def test_no_section_without_torch_compile():
    assert _text(DATA / "ours" / "ab" / "clean_1") == ""


def test_the_gpu_split_on_the_compiled_trainer():
    text = _text(DATA / "gpu" / "h200_2026-11-26" / "lite" / "clean", width=160)
    assert "GPU time in compiled graphs 79.5% (395.163 ms), eager 102.005 ms" in " ".join(text.split())
    assert "trainer/env.py(247): step" not in text  # lite: no stacks to name the functions
    full = _text(DATA / "gpu" / "h200_2026-11-26" / "full" / "clean", width=160)
    assert "trainer/env.py(247): step" in full and "trainer/train.py(136): act_all" in full
