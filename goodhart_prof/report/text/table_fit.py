"""Tables that fit the console: no cell wraps, no interval is split, long names are cut in the middle.

A `Col` is a column: its header, whether it is right-aligned, whether it holds the row's name (the
one column that gives way: its names are cut in the middle to what is left, `distinct_names`, so
two different names never print alike) and a `drop` rank (0: always shown; columns with a higher
rank go first when the table would not fit even with the names at NAME_MIN characters). Every
other cell is kept whole on one line. The width of a rich table without edges is the sum of its
columns plus 3 per separator (` │ `).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from rich.text import Text

from ..common import distinct_names, make_table, safe_text

NAME_MIN = 16   # a name is never cut shorter
NAME_WANT = 40  # optional columns go before a name is cut shorter than this
SEPARATOR = 3


@dataclass(frozen=True)
class Col:
    header: str
    right: bool = False
    name: bool = False
    drop: int = 0


def _width(cell: Any) -> int:
    lines = (cell.plain if isinstance(cell, Text) else str(cell)).split("\n")
    return max(len(line) for line in lines)


def fitted_table(title: str, cols: Sequence[Col], rows: Sequence[Sequence[Any]], width: int,
                 styles: Sequence[str | None] | None = None):
    """A rich table of `rows` (cells: str or Text; names as full strings) no wider than `width`
    (module docstring); `styles` colours each row's name cell."""
    cols = list(cols)
    keep = list(range(len(cols)))
    natural = [max([len(c.header)] + [_width(r[i]) for r in rows]) for i, c in enumerate(cols)]

    def total(kept: list[int]) -> int:
        return sum(min(natural[i], NAME_WANT) if cols[i].name else natural[i] for i in kept) + \
            SEPARATOR * (len(kept) - 1)

    for rank in sorted({c.drop for c in cols if c.drop}, reverse=True):
        if total(keep) <= width:
            break
        keep = [i for i in keep if cols[i].drop != rank]
    name_col = next((i for i in keep if cols[i].name), None)
    names: list[str] = []
    room = 0
    if name_col is not None:
        others = sum(natural[i] for i in keep if i != name_col) + SEPARATOR * (len(keep) - 1)
        room = max(NAME_MIN, min(natural[name_col], width - others))
        names = distinct_names([str(r[name_col]) for r in rows], room)
    table = make_table(title, *(cols[i].header for i in keep),
                       right=tuple(k for k, i in enumerate(keep) if cols[i].right))
    for column in table.columns:
        column.no_wrap = True
    if name_col is not None:  # a header longer than the names may not widen the column
        table.columns[keep.index(name_col)].max_width = room
    for n, row in enumerate(rows):
        cells = []
        for i in keep:
            cell = row[i]
            if i == name_col:
                style = styles[n] if styles is not None else None
                cell = safe_text(names[n], style=style) if style else names[n]
            cells.append(cell)
        table.add_row(*cells)
    return table
