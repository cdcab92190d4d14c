"""report/text/table_fit.py: tables that fit the console. All columns at their natural width when
there is room; else the highest `drop` rank goes first, then the name column gives way, its names
cut in the middle to the room left and kept apart, never below NAME_MIN; other cells stay whole."""
from __future__ import annotations

import io

from rich.console import Console
from rich.text import Text

from goodhart_prof.report.text.table_fit import NAME_MIN, Col, fitted_table

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
