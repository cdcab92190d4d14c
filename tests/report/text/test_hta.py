"""HTA's breakdowns in the terminal report (goodhart_prof/report/text/hta.py): HTA's columns with
units get readable headers and figures in those units, a time and its percent share one cell,
unknown columns are shown as they are, and every table fits 80 columns."""
from __future__ import annotations

import io

import pandas as pd
from rich.console import Console

from goodhart_prof.report.text.hta import render_hta, shown_columns

# The shape HTA 0.5's get_temporal_breakdown and get_idle_time_breakdown return.
TEMPORAL = pd.DataFrame({"rank": [0], "idle_time(us)": [8780.0], "compute_time(us)": [96.0],
                         "non_compute_time(us)": [35.0], "kernel_time(us)": [8911.0],
                         "idle_time_pctg": [98.53], "compute_time_pctg": [1.08],
                         "non_compute_time_pctg": [0.39]})
IDLE = pd.DataFrame({"rank": [0, 0], "stream": [7, 7], "idle_category": ["host_wait", "other"],
                     "idle_time": [8780.0, 0.0], "idle_time_ratio": [1.0, 0.0]})


def _render(frames, width=80) -> list[str]:
    out = io.StringIO()
    render_hta(frames, Console(file=out, width=width, color_system=None))
    return out.getvalue().splitlines()


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("│")]


def test_times_in_their_unit_with_their_share():
    lines = _render({"temporal breakdown": TEMPORAL})
    assert lines[1].rstrip() == "HTA: temporal breakdown (%: of HTA's kernel time)"
    assert [c.strip() for c in lines[2].split("┃")] == ["rank", "idle", "compute", "non-compute", "kernel time"]
    assert _cells(lines[4]) == ["0", "8.78 ms (98.5%)", "96 us (1.1%)", "35 us (0.4%)", "8.91 ms"]


def test_idle_causes_with_their_share_of_idle():
    lines = _render({"idle time breakdown": IDLE})
    assert [c.strip() for c in lines[2].split("┃")] == ["rank", "stream", "idle cause", "idle time", "share of idle"]
    assert _cells(lines[4]) == ["0", "7", "host_wait", "8.78 ms", "100.0%"]
    assert _cells(lines[5]) == ["0", "7", "other", "0 us", "0.0%"]


def test_every_table_fits_80_columns():
    for line in _render({"temporal breakdown": TEMPORAL, "idle time breakdown": IDLE}, width=80):
        assert len(line) <= 80, line


def test_a_column_hta_adds_is_shown_as_it_is():
    frame = pd.DataFrame({"name": ["x" * 80, "y"], "time": [1.23456, 2.0], "n": [1, 2]})
    assert shown_columns(frame) == [("name", ("raw", "name")), ("time", ("raw", "time")), ("n", ("raw", "n"))]
    lines = _render({"kernel breakdown": frame}, width=120)
    assert lines[1].rstrip() == "HTA: kernel breakdown"
    assert _cells(lines[4]) == ["x" * 80, "1.235", "1"] and _cells(lines[5]) == ["y", "2.000", "2"]
    narrow = _render({"kernel breakdown": frame}, width=40)  # the name gives way: 40 - 5 - 1 - 2 x 3
    assert _cells(narrow[4]) == ["x" * 14 + "…" + "x" * 13, "1.235", "1"] and max(map(len, narrow)) <= 40


def test_more_rows_than_shown_are_counted():
    frame = pd.DataFrame({"rank": list(range(25)), "idle_time": [10.0] * 25, "idle_time_ratio": [0.04] * 25})
    lines = _render({"idle time breakdown": frame})
    assert lines[-1] == "... and 5 more rows"
    assert sum(1 for line in lines if line.endswith("4.0%")) == 20
