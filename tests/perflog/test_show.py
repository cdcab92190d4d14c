"""The performance log in the terminal: `describe`'s one line, `log show`'s table (newest
first, markup shown as text, fitting 80 columns with dates whole, paths keeping their run, no cell
wrapped) and `log compare`'s side-by-side table with spreads under their figures, signed deltas,
ratios and verdicts."""
from __future__ import annotations

import io

from rich.console import Console

from goodhart_prof.perflog.compare import compare_rows
from goodhart_prof.perflog.log_file import append
from goodhart_prof.perflog.show import describe, render_comparison, render_rows
from tests.support.helpers import run_main
from tests.support.perflog_tables import measured

A = {"id": 1, "date": "2026-11-20", "change": "baseline", **measured(), "iteration_ms_low": 9.5,
     "iteration_ms_high": 10.5, "iteration_ms_n": 5}
B = {"id": 2, "date": "2026-11-21", "change": "fused [bold]adam[/bold]",
     **measured(iteration_ms=8.0, env_steps_per_s=1250.0, top_kernel="k" * 70), "iteration_ms_low": 7.5,
     "iteration_ms_high": 8.25, "iteration_ms_n": 5}


def printed(render, *args, width: int = 250) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    render(*args, console)
    return console.file.getvalue()


def body(out: str) -> list[list[str]]:
    """The table's body rows as cells."""
    lines = out.splitlines()
    rule = next(i for i, line in enumerate(lines) if "╇" in line)
    return [[c.strip() for c in line.split("│")] for line in lines[rule + 1:] if "│" in line]


def test_describe_is_one_line_formatted_as_in_the_table():
    assert describe(A) == ("id 1 (2026-11-20): Iteration (ms) 10.00, Env-steps/s 1,000, GPU busy % 50.0, "
                           "Syncs/iter 4.00, Memcpy HtoD (ms) 2.000")
    assert describe({"id": 3, "date": "2026-11-22", "iteration_ms": 1234.5}) == \
        "id 3 (2026-11-22): Iteration (ms) 1,234.50"


def test_rows_newest_first_by_their_id_whole_when_there_is_room():
    out = printed(render_rows, [B, A])
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[0].startswith("Performance log (newest first)")
    heads = [c.strip() for c in lines[2].split("┃")]  # headers of two lines: ms/ over iter
    assert heads[:4] == ["#", "date", "change", "trace"]  # one numbering: the id, as `log compare` takes it
    first, second = body(out)
    assert first[:5] == ["2", "2026-11-21", "fused [bold]adam[/bold]", "t.json", "8.00"]  # markup shown as written
    assert second[:5] == ["1", "2026-11-20", "baseline", "t.json", "10.00"]
    assert "k" * 70 in first  # room for the whole kernel name
    assert max(map(len, out.splitlines())) <= 250


def test_rows_fit_80_columns_with_dates_whole_and_paths_keeping_their_run():
    row = {**A, "created": "2026-11-27T07:01:09+0000", "trace": "/work/main/tests/data/ours/ab/item_logging",
           "change": "plant .item() logging in the loop"}
    other = {**B, "created": "2026-11-27T08:15:00+0000", "trace": "/work/main/tests/data/ours/ab/clean_1"}
    wide = body(printed(render_rows, [other, row], width=200))
    assert wide[1][:4] == ["1", "2026-11-27 07:01", "plant .item() logging in the loop",
                           "/work/main/tests/data/ours/ab/item_logging"]
    out = printed(render_rows, [other, row], width=80)
    assert max(map(len, out.splitlines())) <= 80
    rows = body(out)
    assert len(rows) == 2  # one line per row: nothing wrapped
    assert "2026-11-27 07:01" not in out  # the date goes before names are cut under 16
    assert rows[1][0] == "1" and rows[1][1].startswith("plant .item()") and rows[1][1].endswith("…")
    assert rows[1][2].endswith("/item_logging") and rows[0][2].endswith("/clean_1") and "…" in rows[1][2]
    assert rows[1][3:5] == ["10.00", "1,000"]  # the figures stay whole


def test_comparison_shows_spreads_signed_deltas_ratios_and_verdicts():
    out = printed(render_comparison, A, B, compare_rows(A, B))
    assert "A: id 1 2026-11-20 baseline (t.json)" in out
    assert "B: id 2 2026-11-21 fused [bold]adam[/bold] (t.json)" in out
    rows = body(out)
    # each figure over its interval, on two lines of one row
    assert rows[0] == ["Iteration (ms)", "10.00", "8.00", "-2.00", "0.800x", "better"]
    assert rows[1] == ["", "9.50-10.50, n 5", "7.50-8.25, n 5", "", "", ""]
    assert rows[2] == ["Env-steps/s", "1,000", "1,250", "+250", "1.250x", "no spread recorded"]
    kernel = next(r for r in rows if r[0] == "Top kernel")
    assert kernel == ["Top kernel", "k1", "k" * 70, "", "", "changed"]
    narrow = printed(render_comparison, A, B, compare_rows(A, B), width=80)
    assert max(map(len, narrow.splitlines())) <= 80
    kernel = next(r for r in body(narrow) if r[0] == "Top kernel")
    assert kernel[2].startswith("kkk") and "…" in kernel[2] and len(kernel[2]) < 70


def test_log_compare_and_show_commands(tmp_path, capsys):
    log = tmp_path / "PERFLOG.md"
    append(measured(), "baseline", log)
    append(measured(iteration_ms=8.0, env_steps_per_s=1250.0, gpu_busy_pct=60.0,
                    syncs_per_iteration=0.0, top_kernel="k2", top_kernel_pct=25.0,
                    memcpy_htod_ms=1.0), "no .item()", log)
    code, out, _ = run_main(["log", "compare", "1", "2", "--log", str(log)], capsys)
    assert code == 0
    lines = {line.split("│")[0].strip(): line for line in out.splitlines() if "│" in line}
    assert "-2.00" in lines["Iteration (ms)"] and "0.800x" in lines["Iteration (ms)"] and "no spread recorded" in lines["Iteration (ms)"]
    assert "+250" in lines["Env-steps/s"] and "1.250x" in lines["Env-steps/s"]
    assert "-4.00" in lines["Syncs/iter"] and "changed" in lines["Top kernel"]
    code, out, _ = run_main(["log", "show", "--log", str(log)], capsys)
    assert code == 0 and out.index("no .item()") < out.index("baseline")
