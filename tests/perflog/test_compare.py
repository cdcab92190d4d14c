"""Comparing performance log rows: rows are found by number (newest first) or id, deltas and
ratios are B against A, time and env-steps/s are judged by their recorded spread, and a bad row
reference is one line (exit 2)."""
from __future__ import annotations

import pytest

from goodhart_prof.perflog.compare import compare_rows, select
from goodhart_prof.perflog.log_file import PerfLogError, append, read_rows
from tests.support.helpers import run_main
from tests.support.perflog_tables import measured, one_line_error

BASELINE = {"id": 1, "change": "baseline", **measured()}
FASTER = {"id": 2, "change": "no .item()", **measured(iteration_ms=8.0, env_steps_per_s=1250.0, gpu_busy_pct=60.0,
                                                      syncs_per_iteration=0.0, top_kernel="k2", top_kernel_pct=25.0,
                                                      memcpy_htod_ms=1.0)}


def test_select_by_id_the_one_numbering_of_show_and_the_markdown():
    rows = [FASTER, BASELINE]  # newest first, as read_rows gives them
    assert select(rows, "1") is BASELINE and select(rows, " 2 ") is FASTER
    assert select(rows, "id:1") is BASELINE and select(rows, "id:2") is FASTER
    for ref, message in (("0", r"0: no row with that id \(ids: 1, 2\)"), ("3", "no row with that id"),
                         ("abc", "'abc'"), ("-1", "'-1'"), ("id:7", r"no row with that id \(ids: 1, 2\)")):
        with pytest.raises(PerfLogError, match=message):
            select(rows, ref)


def test_compare_rows_deltas_ratios_and_verdicts():
    a, b = BASELINE, FASTER
    fields = {f["field"]: f for f in compare_rows(a, b)}
    # rows without a recorded spread (as older rows) never call time or env-steps/s better or worse
    expect = {"iteration_ms": (-2.0, 0.8, "no spread recorded"),
              "env_steps_per_s": (250.0, 1.25, "no spread recorded"),
              "gpu_busy_pct": (10.0, 1.2, "better"), "syncs_per_iteration": (-4.0, 0.0, "better"),
              "top_kernel_pct": (-5.0, 25 / 30, None), "memcpy_htod_ms": (-1.0, 0.5, "better")}
    for name, (delta, ratio, verdict) in expect.items():
        f = fields[name]
        assert (f["delta"], f["verdict"]) == (pytest.approx(delta), verdict), name
        assert f["ratio"] == pytest.approx(ratio), name
    assert fields["top_kernel"]["verdict"] == "changed" and fields["top_kernel"]["delta"] is None
    assert [f["verdict"] for f in compare_rows(b, a)][:4] == ["no spread recorded", "no spread recorded", "worse", "worse"]
    spread = {"env_steps_per_s_low": 900.0, "env_steps_per_s_high": 1100.0, "env_steps_per_s_n": 5}
    for b_low, b_high, n, verdict in ((1050.0, 1400.0, 5, "within noise"), (1150.0, 1400.0, 5, "better"),
                                      (1150.0, 1400.0, 2, "not judged")):
        b2 = {**b, "env_steps_per_s_low": b_low, "env_steps_per_s_high": b_high, "env_steps_per_s_n": n}
        got = {f["field"]: f["verdict"] for f in compare_rows({**a, **spread}, b2)}
        assert got["env_steps_per_s"] == verdict, (b_low, n)


def test_ratio_when_a_is_zero():
    zero = {**BASELINE, "syncs_per_iteration": 0.0}
    fields = {f["field"]: f for f in compare_rows(zero, {**FASTER, "syncs_per_iteration": 0.0})}
    assert (fields["syncs_per_iteration"]["ratio"], fields["syncs_per_iteration"]["verdict"]) == (1.0, None)
    fields = {f["field"]: f for f in compare_rows(zero, {**FASTER, "syncs_per_iteration": 2.0})}
    assert (fields["syncs_per_iteration"]["ratio"], fields["syncs_per_iteration"]["verdict"]) == (None, "worse")


def test_rows_appended_are_selected_as_log_show_numbers_them(tmp_path):
    log = tmp_path / "PERFLOG.md"
    append(measured(), "baseline", log)
    append(measured(iteration_ms=8.0), "no .item()", log)
    rows = read_rows(log)
    a, b = select(rows, "1"), select(rows, "id:2")
    assert (a["change"], b["change"]) == ("baseline", "no .item()")


def test_bad_row_references_are_one_line_exit_2(tmp_path, capsys):
    log = tmp_path / "PERFLOG.md"
    append(measured(), "only row", log)
    for ref, words in (("0", ("no row with that id",)), ("2", ("no row with that id",)), ("abc", ("abc",)),
                       ("id:7", ("id:7",)), ("-1", ())):
        one_line_error(*run_main(["log", "compare", ref, "1", "--log", str(log)], capsys)[::2], *words)
