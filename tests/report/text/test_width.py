"""The terminal report of every fixture trace fits the console it is given (80, 100, 160 columns):
no line wider than it, no header or figure cut, no row wrapped, no cut names alike, one line per kernel
(no C++ name wrapped over two lines; short names: tests/trace/test_names.py), findings' evidence
as labelled figures (their wording: tests/report/test_common.py)."""
from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from goodhart_prof.analysis import analyze
from goodhart_prof.report.text.report import render
from goodhart_prof.trace.load import load
from tests.support.paths import DATA
from tests.support.table_checks import check

TRACES = sorted(p.relative_to(DATA).as_posix() for p in DATA.glob("*/*.json.gz")) + [
    "param/dlrm_8rank", "hta/sampled_128rank"]
TOP = 15


@pytest.fixture(scope="module")
def analyses():
    return {name: analyze(load(DATA / name)) for name in TRACES}


def rendered(a, width: int) -> list[str]:
    out = io.StringIO()
    render(a, Console(width=width, file=out, color_system=None), TOP)
    return out.getvalue().splitlines()


def table_body(lines: list[str], title: str) -> list[str]:
    """The body lines of the table whose title starts with `title` (until a line without │)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rule = next(i for i in range(start, len(lines)) if "╇" in lines[i])
    body = []
    for line in lines[rule + 1:]:
        if "│" not in line:
            break
        body.append(line)
    return body


@pytest.mark.parametrize("width", [80, 100, 160])
@pytest.mark.parametrize("name", TRACES)
def test_report_fits_the_console(analyses, name, width):
    a = analyses[name]
    lines = rendered(a, width)
    check(lines, width)  # no line too wide, no header or figure cut, no row wrapped, no cut names alike
    # no C++ name cut over two lines: no `void` (or its fragment) alone on a line or in a cell
    assert not [line for line in lines if re.fullmatch(r"[\s│]*void[\s│]*", line)]
    assert not [line for line in lines if re.search(r"(^|│ )void ", line)]
    if not a.kernels.empty:  # one line per kernel, each with every column separator
        body = table_body(lines, f"Top {min(TOP, len(a.kernels))} of")
        assert len(body) == min(TOP, len(a.kernels))
        # (at 100 columns the library goes first, then the mean: tests/test_tables.py)
        assert all(line.count("│") == body[0].count("│") >= 4 and line.split("│")[0].strip() for line in body)
    eff = a.efficiency
    if eff is not None and not eff.kernels.empty:
        body = table_body(lines, "Roofline, top")
        assert len(body) == min(TOP, len(eff.kernels))
    # evidence is labelled figures, not a Python dict
    assert not [line for line in lines if "evidence: {" in line or "{'" in line]


@pytest.mark.parametrize("columns, widest", [("120", 120), ("", 100)])
def test_the_cli_piped_follows_columns_else_100(columns, widest):
    """`goodhart-prof analyze` into a pipe or file: COLUMNS when set (a user's `COLUMNS=120`),
    else 100 columns (the width when the terminal's is unknown); either way no line wider."""
    from click.testing import CliRunner

    from goodhart_prof.cli import cli
    env = {"COLUMNS": columns} if columns else {"COLUMNS": ""}
    out = CliRunner().invoke(cli, ["analyze", str(DATA / "tracelens" / "h100_owlv2_inference.json.gz")],
                             env=env)
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert max(map(len, lines)) == widest
