"""report/text/report.py: the terminal report of `goodhart-prof analyze`. A hand-made GPU trace read
section by section (span, busy and idle worked out by hand: kernels 110-210 and 310-410 us, a 2 us
copy at 630), a CPU-only trace's sentences instead of empty tables, a table of 25 devices capped
at 20 with the line saying so, and HTA's breakdowns printed as tables."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from goodhart_prof.analysis import analyze
from goodhart_prof.report.text.report import render
from tests.support.analyses import analysis_of
from tests.support.events import X, cuda_item, launch, load_events, op


def text(a, width: int = 140) -> list[str]:
    out = io.StringIO()
    render(a, Console(file=out, width=width, color_system=None), 15)
    return out.getvalue().splitlines()


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("│")]


def row(lines: list[str], first: str) -> list[str]:
    return cells(next(x for x in lines if x.startswith(first)))


@pytest.fixture
def gpu_lines(tmp_path):
    events = launch("k1", 100, 1, "aten::mm") + launch("k2", 300, 2) + cuda_item(600, 10)
    return text(analyze(load_events(tmp_path, events)))


def test_gpu_trace_section_by_section(gpu_lines):
    lines = gpu_lines
    assert lines[0].startswith("goodhart-prof analyze /") and lines[0].endswith(".json")  # one space: it had two
    assert lines[1] == "11 events · ranks [0] (from single file) · 1 GPU device(s)"
    # span 110 -> 632 us; busy 100 + 100 + 2; idle the rest
    assert row(lines, "rank 0 / gpu 0 │") == ["rank 0 / gpu 0", "522.0 us", "202.0 us", "320.0 us", "38.7%",
                                             "200.0 us"]
    assert any(x.startswith("Top 3 of 3 GPU kernels by total time") for x in lines)
    assert row(lines, "k1 ")[3:] == ["1", "100.0 us", "100.0 us", "49.5%"]
    assert "Sync points: 1 (item 1)" in lines
    assert row(lines, "aten::item │ item") == ["aten::item", "item", "1", "50.0 us"]
    # aten::item 50 us holds _local_scalar_dense 48 us: self 2 us of 58 us host time
    assert row(lines, "aten::item  ")[1:4] == ["1", "2.0 us", "3.4%"]
    assert any(x.startswith("LOW    dominant_kernel: one kernel, k1, takes 50% of GPU time") for x in lines)


def test_cpu_only_trace_says_so_in_sentences(tmp_path):
    lines = text(analyze(load_events(tmp_path, [op("aten::relu", 0, 10)])))
    assert "GPU time: no GPU activity in this trace (a CPU-only run?)" in lines
    assert any(x.startswith("Sync points: none, a CPU-only trace, where nothing waits") for x in lines)
    assert any(x.startswith("Memory: no memory events in this trace") for x in lines)
    assert "Findings: none of the rules fired" in lines
    assert not any(x.startswith(("Top ", "Burstiness")) and "kernels" in x for x in lines)


def test_many_devices_are_capped_with_a_line(tmp_path):
    events = [X("k", "kernel", 100, 10 + d, pid=d, tid=7, device=d, stream=7, correlation=d + 1) for d in range(25)]
    lines = text(analyze(load_events(tmp_path, events)))
    shown = [x for x in lines if x.startswith("rank 0 / gpu ") and " us │ " in x and "%" in x]
    assert len(shown) == 20
    assert "... and 5 more devices (the 20 with the most idle time are shown; --json lists all)" in lines
    assert row(lines, "k      ")[3:5] == ["25", f"{sum(10 + d for d in range(25)):.1f} us"]  # 550 us


def _idle_table(lines: list[str]) -> list[str]:
    start = next(i for i, x in enumerate(lines) if x.startswith("Why the GPU idles"))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def test_idle_causes_past_the_top_five_are_summed_so_the_shares_add_up():
    a = analysis_of("hta/mi250_minitoy_rocm.json.gz")
    causes = a.burstiness[0].idle_causes
    assert len(causes) == 10
    table = _idle_table(text(a))
    assert "mostly in (Python)" not in table[1]  # no stacks in this trace: no empty column
    last = cells(table[-1])
    assert last[1] == "(the other 5 causes)"
    assert last[3] == f"{100 * sum(c['share'] for c in causes[5:]):.1f}%"
    shares = [float(cells(x)[3].rstrip("%")) for x in table[3:]]
    assert abs(sum(shares) - 100.0) <= 0.05 * len(shares)  # each share rounded to 0.1%


def test_the_python_column_shows_where_a_cause_has_a_frame():
    table = _idle_table(text(analysis_of("tracelens/h100_owlv2_inference.json.gz"), width=200))
    assert cells(table[1].replace("┃", "│"))[-1] == "mostly in (Python)"
    assert "scipy/ndimage/_interpolation.py(739): zoom" in table[3]
