"""Tables that fit the console, for every command that prints one (analyze, diff, log show,
log compare): no cell wraps, no interval is split, long names are cut so the part that differs stays.

A `Col` is a column: its header (a `\\n` in it makes two lines: headers are chosen short and
readable, never cut), whether it is right-aligned, whether it holds names (the columns that give
way: their names are cut to what is left, `distinct_names`, so two different names never print
alike), how a name is cut (`middle`: `cutlass_75_tens…32x3_nn_align8`; `path`: the file name kept
whole, `/work/main/te…/ab/clean_1`; `end`: prose, `plant .item() logg…`) and a `drop` rank (0:
always shown; columns with a higher rank go first when the table would not fit even with its
names at NAME_WANT characters, or the column's own `want`). Every other cell is kept whole; a
cell of two lines (a figure over its interval) is a Text. The width of a rich
table without edges is the sum of its columns plus 3 per separator (` │ `).

`fitted_table` builds the rich table for a width; `FittedTable` takes rows like a rich Table and
fits itself to the console it is printed on. String cells are text, never rich markup (a name like
`aten::mm [param|cuda]` is shown as it is); a cell that wants a style is a `safe_text`.

Below report/ and perflog/ (both use it); it imports only rich and textsafe.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from rich.table import Table
from rich.text import Text

from .textsafe import printable

NAME_MIN = 16   # a name is never cut shorter
NAME_WANT = 40  # optional columns go before a name is cut shorter than this
SEPARATOR = 3


def safe_text(text: Any, **kwargs: Any) -> Text:
    """A rich Text of `text` made printable."""
    return Text(printable(text), **kwargs)


# -- names cut to a width ---------------------------------------------------------------------------
def short_middle(text: Any, width: int) -> str:
    """A long name cut in the middle (`cutlass_75_tensorop_…_128x64_nn`): its start says what it
    is and its end which variant, where names that differ usually differ."""
    text = str(text)
    if len(text) <= width:
        return text
    if width < 3:
        return text[:width]
    head = width // 2
    tail = width - 1 - head
    return text[:head] + "…" + (text[-tail:] if tail else "")


def short_end(text: Any, width: int) -> str:
    """Prose cut at its end (`plant .item() logg…`)."""
    text = str(text)
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def short_path(text: Any, width: int) -> str:
    """A path cut in the middle keeping its last part (the file or run folder) whole
    (`/work/main/te…/ab/clean_1`); a last part longer than the width keeps its end."""
    text = str(text)
    if len(text) <= width:
        return text
    cut = text.rstrip("/").rfind("/")
    last = text[cut:] if cut >= 0 else text
    room = width - 1 - len(last)
    if room < 4:
        return "…" + text[len(text) - (width - 1):] if width > 1 else text[:width]
    head = min(room, max(4, room // 3))  # the start says where; the rest goes to the run's folders
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


CUTS: dict[str, Callable[[Any, int], str]] = {"middle": short_middle, "path": short_path, "end": short_end}


def distinct_names(names: "list[Any]", width: int, cut: str = "middle") -> list[str]:
    """Each name within `width` (cut by `CUTS[cut]`; a name of several lines line by line), and no
    two different names the same: where two would print alike, each shows a window around the
    first place the group's names differ."""
    full = [str(n) for n in names]
    out = ["\n".join(CUTS[cut](line, width) for line in n.split("\n")) for n in full]
    for _ in range(4):  # a group split on its first difference may still hold a smaller group
        groups: dict[str, set[str]] = {}
        for name, shown in zip(full, out):
            groups.setdefault(shown, set()).add(name)
        clashes = {s: g for s, g in groups.items() if len(g) > 1}
        if not clashes:
            return out
        for i, (name, shown) in enumerate(zip(full, out)):
            if shown in clashes and "\n" not in name:
                out[i] = _window(name, _common_prefix(clashes[shown]), width)
    return out


def _common_prefix(names: "set[str]") -> int:
    first, last = min(names), max(names)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return n


def _window(name: str, at: int, width: int) -> str:
    """`width` characters of name around position `at`, ellipses where it is cut."""
    if len(name) <= width:
        return name
    start = max(0, min(at - (width - 2) // 3, len(name) - (width - 1)))
    if start == 0:
        return name[: width - 1] + "…"
    end = start + width - 2
    if end >= len(name):
        return "…" + name[len(name) - (width - 1):]
    return "…" + name[start:end] + "…"


# -- rich tables ------------------------------------------------------------------------------------
class PlainTable(Table):
    """A table whose string cells are text, never markup: a cell holds names and sites from a
    trace (`aten::mm [param|cuda]`), which rich would read as a style tag and drop. A cell that
    wants a style is a `safe_text(..., style=...)`."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        super().add_row(*(safe_text(c) if isinstance(c, str) else c for c in renderables), **kwargs)


def make_table(title: str, *columns: str, right: tuple[int, ...] = ()) -> Table:
    """A rich table in the reports' style (no edges, title on the left, in bold), its cells kept
    on one line (cut with an ellipsis if the console is narrower than the table: `fitted_table`
    sees that it is not). String cells are shown as they are (no markup)."""
    out = PlainTable(title=title or None, title_justify="left", title_style="bold", show_edge=False,
                     pad_edge=False)
    for i, col in enumerate(columns):  # a header of two lines is a Text: a console that makes
        # every string printable would show its newline as `\n`
        out.add_column(Text(col) if "\n" in col else col, justify="right" if i in right else "left",
                       overflow="ellipsis", no_wrap=True)
    return out


@dataclass(frozen=True)
class Col:
    header: str
    right: bool = False
    name: bool = False
    drop: int = 0
    cut: str = "middle"
    want: int = NAME_WANT  # a name column: the width below which optional columns go first


def _width(cell: Any) -> int:
    # as shown: each line of a string cell made printable (a control byte shows as `\x1b`, 4 wide)
    lines = cell.plain.split("\n") if isinstance(cell, Text) else [printable(x) for x in str(cell).split("\n")]
    return max(len(line) for line in lines)


def _rooms(wants: list[int], room: int) -> list[int]:
    """`room` shared among name columns that want `wants` characters: the narrowest first get
    what they want, the rest an equal share each, none under NAME_MIN (or its own width)."""
    out = [0] * len(wants)
    left = room
    order = sorted(range(len(wants)), key=lambda i: wants[i])
    for k, i in enumerate(order):
        share = left // (len(order) - k)
        out[i] = max(min(wants[i], NAME_MIN), min(wants[i], share))
        left -= out[i]
    return out


def fitted_table(title: str, cols: Sequence[Col], rows: Sequence[Sequence[Any]], width: int,
                 styles: Sequence[str | None] | None = None) -> Table:
    """A rich table of `rows` (cells: str or Text; names as full strings) no wider than `width`
    (module docstring); `styles` colours each row's first name cell."""
    cols = list(cols)
    keep = list(range(len(cols)))
    natural = [max([_width(c.header)] + [_width(r[i]) for r in rows]) for i, c in enumerate(cols)]

    def total(kept: list[int]) -> int:
        return sum(min(natural[i], cols[i].want) if cols[i].name else natural[i] for i in kept) + \
            SEPARATOR * (len(kept) - 1)

    for rank in sorted({c.drop for c in cols if c.drop}, reverse=True):
        if total(keep) <= width:
            break
        keep = [i for i in keep if cols[i].drop != rank]
    named = [i for i in keep if cols[i].name]
    others = sum(natural[i] for i in keep if i not in named) + SEPARATOR * (len(keep) - 1)
    rooms = dict(zip(named, _rooms([natural[i] for i in named], width - others)))
    shown = {i: distinct_names([_plain(r[i]) for r in rows], rooms[i], cols[i].cut) for i in named}
    table = make_table(title, *(cols[i].header for i in keep),
                       right=tuple(k for k, i in enumerate(keep) if cols[i].right))
    for i in named:  # a header longer than the names may not widen the column
        table.columns[keep.index(i)].max_width = max(rooms[i], _width(cols[i].header))
    first = named[0] if named else None
    for n, row in enumerate(rows):
        cells = []
        for i in keep:
            cell = row[i]
            if i in shown:
                style = styles[n] if styles is not None and i == first else None
                style = style or (cell.style if isinstance(cell, Text) else None)
                cell = _lines(shown[i][n], style)
            cells.append(cell)
        table.add_row(*cells)
    return table


def _lines(text: str, style: Any) -> Any:
    """A cut name as a cell: a string, or a Text where it has a style or several lines (a string's
    newline would be shown as `\\n` by a console that makes strings printable)."""
    if "\n" in text:
        return Text("\n", style=style or "").join(safe_text(line) for line in text.split("\n"))
    return safe_text(text, style=style) if style else text


def _plain(cell: Any) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


class FittedTable:
    """Rows added as to a rich Table; printed, it is `fitted_table` at the console's width."""

    def __init__(self, title: str, *cols: Col) -> None:
        self.title, self.cols = title, cols
        self.rows: list[tuple] = []
        self.styles: list[str | None] = []

    def add_row(self, *cells: Any, style: str | None = None) -> None:
        """One row, a cell per column; `style` colours its name."""
        self.rows.append(cells)
        self.styles.append(style)

    def __rich_console__(self, console, options):
        styles = self.styles if any(self.styles) else None
        yield fitted_table(self.title, self.cols, self.rows, options.max_width, styles)
