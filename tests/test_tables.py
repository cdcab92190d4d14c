"""goodhart_prof/tables.py: tables that fit the console. All columns at their natural width when
there is room; else the highest `drop` rank goes first, then the name columns give way, their names
cut (middle, path, end) to the room left and kept apart, never below NAME_MIN; other cells stay
whole; string cells are text, never markup."""
from __future__ import annotations

import io

from rich.console import Console
from rich.text import Text

from goodhart_prof.tables import (NAME_MIN, Col, FittedTable, distinct_names, fitted_table, make_table, short_end,
                                  short_middle, short_path)

A = "cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_32x3_nn_align8"  # 62 characters
B = A.replace("256x128", "128x128")
COLS = (Col("kernel", name=True), Col("time", True), Col("count", True, drop=2), Col("share", True, drop=1))
ROWS = [(A, "1.500 ms", "12", "50.0%"), (B, "1.000 ms", "8", "33.3%")]


def lines(table, width: int) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(table)
    return out.getvalue().splitlines()


def body(table, width: int) -> list[list[str]]:
    return [[c.strip() for c in x.split("│")] for x in lines(table, width) if "│" in x]


def test_room_for_everything_keeps_names_whole():
    table = fitted_table("T", COLS, ROWS, 100)
    assert [c.header for c in table.columns] == ["kernel", "time", "count", "share"]
    assert body(table, 100) == [[A, "1.500 ms", "12", "50.0%"], [B, "1.000 ms", "8", "33.3%"]]


def test_optional_columns_go_before_names_are_cut_below_forty():
    # names at 40 + 8 + 5 + 5 + 3 separators of 3 = 67 > 60: `count` (drop 2) goes, then 59 fits
    table = fitted_table("T", COLS, ROWS, 60)
    assert [c.header for c in table.columns] == ["kernel", "time", "share"]
    rows = body(table, 60)
    # the name gets what is left: 60 - (8 + 5) - 2 separators = 41
    assert [len(r[0]) for r in rows] == [41, 41] and rows[0][0] != rows[1][0]
    assert [r[1:] for r in rows] == [["1.500 ms", "50.0%"], ["1.000 ms", "33.3%"]]
    assert max(len(x) for x in lines(table, 60)) <= 60


def test_narrow_names_keep_what_differs_and_never_go_below_the_minimum():
    table = fitted_table("T", COLS, ROWS, 30)
    assert [c.header for c in table.columns] == ["kernel", "time"]
    names = [r[0] for r in body(table, 30)]
    assert [len(n) for n in names] == [19, 19]  # 30 - 8 - 3
    assert "256x128" in names[0] and "128x128" in names[1]
    tiny = fitted_table("T", COLS, ROWS, 10)
    assert tiny.columns[0].max_width == NAME_MIN == 16


def test_styles_colour_the_name_cells():
    table = fitted_table("T", COLS, ROWS, 100, styles=["red", None])
    first, second = table.columns[0]._cells
    assert isinstance(first, Text) and first.style == "red" and first.plain == A
    assert not (isinstance(second, Text) and second.style)


def test_names_cut_in_the_middle_keep_what_differs():
    assert short_middle(A, 30) == "cutlass_75_tens…32x3_nn_align8" and len(short_middle(A, 30)) == 30
    shown = distinct_names([A, B, "x"], 30)
    assert shown[0] != shown[1] and all(len(s) <= 30 for s in shown) and shown[2] == "x"
    assert "256x128" in shown[0] and "128x128" in shown[1]


def test_a_path_keeps_its_last_part_and_prose_its_start():
    path = "/work/main/tests/data/ours/ab/item_logging"  # 42 characters
    assert short_path(path, 42) == path
    assert short_path(path, 30) == "/work…ata/ours/ab/item_logging"  # a third of what is left to the start
    assert short_path(path, 16) == "…ab/item_logging"  # the last part alone, when little else fits
    assert short_path("/r/run.json", 8) == "…un.json"
    assert short_end("plant .item() logging in the loop", 14) == "plant .item()…"
    # two runs whose paths differ only inside the cut part still print apart
    a, b = "/data/runs/2026-11-27/a/x/rank-0.json", "/data/runs/2026-11-28/a/x/rank-0.json"
    shown = distinct_names([a, b], 20, cut="path")
    assert shown[0] != shown[1] and all(len(s) <= 20 for s in shown)


def test_several_name_columns_share_the_room():
    cols = (Col("#", True), Col("change", name=True, cut="end"), Col("trace", name=True, cut="path"))
    rows = [("1", "x" * 50, "/a/b/c/" + "d" * 40), ("2", "short", "/e/f")]
    table = fitted_table("T", cols, rows, 60)
    # 60 - 1 - 2 separators of 3 = 53: both want more than half: the narrower 26, the other 27
    got = body(table, 60)
    assert [len(r[1]) for r in got] == [27, 5] and [len(r[2]) for r in got] == [26, 4]
    assert got[0][2] == "…" + "d" * 25 and got[0][1] == "x" * 26 + "…"
    assert max(len(x) for x in lines(table, 60)) <= 60


def test_a_fitted_table_fits_the_console_it_is_printed_on():
    table = FittedTable("T", *COLS)
    for row in ROWS:
        table.add_row(*row)
    wide, narrow = body(table, 100), body(table, 60)
    assert wide == [[A, "1.500 ms", "12", "50.0%"], [B, "1.000 ms", "8", "33.3%"]]
    assert [len(r) for r in narrow] == [3, 3] and [len(r[0]) for r in narrow] == [41, 41]


def test_cells_are_text_not_markup():
    table = make_table("T", "name", "us", right=(1,))
    table.add_row("aten::mm [param|cuda]", "5")
    out = lines(table, 80)
    assert "aten::mm [param|cuda] │  5" in out
    assert [c.justify for c in table.columns] == ["left", "right"]
