"""Reading a command's tables back from its text (box-drawing rules of the reports' rich tables)
and the checks every table must pass (tests/e2e/test_widths.py, tests/report/text/test_width.py):
no line wider than the width, no header or figure cut, no row wrapped onto a second line (only
an interval may sit under its figure), no two rows alike where a name was cut."""
from __future__ import annotations

import re

FIGURE_CUT = re.compile(r"^[-+]?[\d,.]*\d[\d,.]*( [\w/%]*)?…$")  # `13.009 m…`, `1,3…`: a figure cut
INTERVAL = re.compile(r"^\(?[-+]?[\d.,]+-[\d.,]+( [\w/-]+)?(, n \d+)?\)?$")  # a figure's interval under it


def tables(lines: list[str]) -> list[tuple[list[str], list[list[str]]]]:
    """Each table's header cells (its lines joined) and body rows as cells."""
    out, i = [], 0
    while i < len(lines):
        if "┃" not in lines[i]:
            i += 1
            continue
        heads = []
        while "┃" in lines[i]:
            heads.append([c.strip() for c in lines[i].split("┃")])
            i += 1
        assert "╇" in lines[i]
        body = []
        i += 1
        while i < len(lines) and "│" in lines[i]:
            body.append([c.strip() for c in lines[i].split("│")])
            i += 1
        out.append((heads, body))
    return out


def check(lines: list[str], width: int) -> int:
    """The widths and cuts every table must keep; the number of tables seen."""
    assert [line for line in lines if len(line) > width] == []
    found = tables(lines)
    for heads, body in found:
        assert not [c for row in heads for c in row if "…" in c], heads  # headers are never cut
        assert not [c for row in body for c in row if FIGURE_CUT.search(c)], body  # nor figures
        # a line that is mostly blank continues the row above: only an interval may (never a
        # name or figure wrapped onto a second line)
        wrapped = [row for row in body if 2 * sum(not c for c in row) >= len(row)
                   and not all(INTERVAL.match(c) for c in row if c)]
        assert wrapped == [], wrapped
        cut = [tuple(row) for row in body if any("…" in c for c in row)]
        assert len(set(cut)) == len(cut), cut  # a cut name never makes two rows alike
    return len(found)
