"""The terminal report's efficiency section (goodhart_prof/report/text/efficiency.py): each kind of
device named once with its peak's source, and the roofline by op type summed over the devices of
one model, with each device's TFLOP/s as a range."""
from __future__ import annotations

import io

from rich.console import Console

from goodhart_prof.report.text.report import render
from tests.support.analyses import analysis_of


def text(a, width: int = 160) -> list[str]:
    out = io.StringIO()
    render(a, Console(file=out, width=width, color_system=None))
    return out.getvalue().splitlines()


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("│")]


def test_many_ranks_of_one_gpu_model_read_as_one_line_and_one_row_per_op():
    lines = text(analysis_of("param/dlrm_8rank"), width=160)
    device_lines = [x.rstrip() for x in lines if "V100 SXM2" in x and "peak" in x]
    assert device_lines == ["  8 devices (rank 0 / gpu 0 .. rank 7 / gpu 7): Tesla V100-SXM2-32GB; peak V100 SXM2"]
    assert sum(x.count("volta-v100-datasheet") for x in lines) == 1  # the source once, not once per rank
    start = next(i for i, x in enumerate(lines) if x.startswith("Roofline, by op type, summed over 8 devices"))
    rows = [cells(x) for x in lines[start + 3:start + 6]]
    assert [r[0] for r in rows] == ["mm", "addmm", "bmm"]
    assert rows[0][1:4] == ["fp32", "104", "837.0 us"] and rows[0][5] == "0.38 (0.36-0.43)"
    assert rows[2][5] == "0.04"  # every device alike: no range

