"""report/common.py: what the report writers share. Percentages, savings as the reports say
them, names cut to a width, intervals, findings' evidence as labelled figures,
the overwrite rule, the safe console, capped tables and the line under them
(durations and bytes: tests/test_units.py)."""
from __future__ import annotations

import io

import numpy as np
import pytest

from goodhart_prof.analysis.rules.finding import Finding
from goodhart_prof.errors import UserError
from goodhart_prof.report.common import (SafeConsole, capped, evidence_lines, evidence_value, interval_text,
                                         more_rows, percent, refuse_overwrite, saving_text, short, short_tail)


def test_percent():
    assert percent(0.1234) == "12.3%"
    assert percent(None) == percent(float("nan")) == "-"


def test_saving_text_per_iteration_over_the_trace_or_why_not():
    def finding(**kw):
        return Finding("rule", "high", "title", {}, "fix", **kw)
    assert saving_text(finding(est_saving_us=1660.0, est_saving_share=0.0014)) == \
        "saves ~1.66 ms/iteration (0.14%)"
    assert saving_text(finding(est_saving_us=2_500_000.0, est_saving_share=0.5)) == \
        "saves ~2,500 ms/iteration (50.0%)"
    assert saving_text(finding(est_saving_us=493_000.0, est_saving_share=0.499, saving_basis="trace")) == \
        "saves ~493 ms over the trace (49.9% of its span)"
    assert saving_text(finding(saving_note="no iterations")) == "no time estimate: no iterations"
    assert saving_text(finding()) == "no time estimate"


def test_shortened_names_keep_what_differs():
    assert short("abcdef", 4) == "abc…" and short("abc", 4) == "abc"
    assert short_tail("a > b > c", 5) == "… > c"


def test_interval_text_one_unit_or_nothing():
    assert interval_text(844.7, 1516.0) == "0.845-1.52 ms"
    assert interval_text(2.5e6, 3e6) == "2.5-3 s"
    assert interval_text(6422.2, 9912.0, "rate") == "6,422-9,912"
    assert interval_text(0.5, 1.25, "count") == "0.50-1.25"
    assert interval_text(float("nan"), 1.0) == "" and interval_text(None, 1.0) == ""


def test_evidence_value_in_its_unit():
    assert evidence_value("idle_us", 8308.0) == "8.308 ms"
    assert evidence_value("bytes", 1024) == "1.0 KiB"
    assert evidence_value("share", 0.5) == "50.0%"
    # whole words only: "iteration" holds "ratio" and is no ratio
    assert evidence_value("times_per_iteration", 0.5) == "0.5"
    assert evidence_value("busy_ratio", 0.25) == "25.0%"
    assert evidence_value("share", 1.5) == "1.5"  # outside [0, 1]: not a share after all
    assert evidence_value("ratio", 2.3456) == "2.35"
    assert evidence_value("count", 1234) == "1,234"
    assert evidence_value("flag", True) == "yes"
    assert evidence_value("kernel", "void at::native::(anonymous namespace)::foo<1>(int)") == "foo<...>"


def test_evidence_reads_as_labelled_figures():
    lines = evidence_lines({
        "rank": 7, "device": 7, "utilization": 0.2425, "idle_us": 8308.0, "bytes": 91968.0,
        "gaps": {"count": 233, "p50_us": 20.0},
        "sites": [{"site": "a > b", "count": 21, "total_us": 138.0}] * 4,
        "frame": None})
    assert lines[0] == "rank 7 · GPU 7 · utilization 24.2% · idle 8.308 ms · bytes 89.8 KiB"
    assert lines[1] == "gaps: 233x · p50 20.0 us"
    assert lines[2] == "at:"
    assert lines[3:6] == ["  a > b · 21x · total 138.0 us"] * 3
    assert lines[6] == "  (+1 more)"


def test_refuse_overwrite_folder_existing_and_forced(tmp_path):
    with pytest.raises(UserError, match="is a folder, not a file"):
        refuse_overwrite(tmp_path, force=True)
    existing = tmp_path / "out.html"
    existing.write_text("kept")
    with pytest.raises(UserError, match=r"out\.html: already exists \(use --force to replace it\)"):
        refuse_overwrite(existing, force=False)
    assert refuse_overwrite(existing, force=True) == existing
    assert refuse_overwrite(str(tmp_path / "new.html"), force=False) == tmp_path / "new.html"
    assert existing.read_text() == "kept"  # a check, never a write


def test_console_shows_trace_text_as_it_is():
    out = io.StringIO()
    console = SafeConsole(file=out, width=80, color_system=None)
    console.print("kernel \x1b[2J")
    console.print("k[/z]")  # markup that does not parse: shown, not raised
    text = out.getvalue()
    assert text == "kernel \\x1b[2J\nk[/z]\n" and "\x1b" not in text


def test_capped_rows_and_the_line_under_them():
    assert capped([1, 5, 3], limit=5).tolist() == [0, 1, 2]
    assert capped([1, 5, 3], limit=2).tolist() == [1, 2]  # the largest, in their own order
    assert capped([1, 1, 1], limit=2).tolist() == [0, 1]  # ties: the earlier rows
    assert capped([np.nan, 1, 2], limit=2).tolist() == [1, 2]
    assert more_rows(25, 20, "devices", "most idle time") == \
        "... and 5 more devices (the 20 with the most idle time are shown; --json lists all)"
    assert more_rows(20, 20, "devices", "most idle time") == ""


def test_count_text_whole_from_ten_or_when_whole_else_one_decimal():
    from goodhart_prof.report.common import count_text
    assert [count_text(v) for v in (None, 0, 3.0, 2.5, 9.94, 10.4, 1234.6)] == \
        ["-", "0", "3", "2.5", "9.9", "10", "1,235"]
