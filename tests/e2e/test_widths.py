"""Every table of every command fits the terminal (issue 35 item 5): `analyze` (every section: GPU
time, kernels, host ops, syncs, burstiness, idle causes, phases, communication, ranks, memory,
efficiency, critical path, `--hta`), `diff`, `log show` and `log compare`, run in this process
(click's CliRunner) at COLUMNS=80, 100 and 160 on small fixtures. No line is wider than the
width, no header is cut, no figure is cut, and no two rows of a table print alike where a name
was cut (tests/support/table_checks.py). The tables' rules themselves: tests/test_tables.py."""
from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from goodhart_prof.cli import cli
from tests.support.paths import DATA
from tests.support.table_checks import check, tables

WIDTHS = (80, 100, 160)
AB = DATA / "ours" / "ab"
COMMANDS = {
    "analyze cpu run": ["analyze", str(AB / "item_logging")],  # host reads, phases
    "analyze cpu full": ["analyze", str(DATA / "ours" / "cpu_full_mode.pt.trace.json.gz")],  # memory
    "analyze dlrm": ["analyze", str(DATA / "param" / "dlrm_8rank")],  # communication, ranks, roofline
    "analyze mi250 --hta": ["analyze", "--hta", str(DATA / "hta" / "mi250_minitoy_rocm.json.gz")],
    "analyze critical path": ["analyze", str(DATA / "hta" / "critical_path_simple_add.json.gz")],
    "analyze h200": ["analyze", str(DATA / "gpu" / "h200_2026-11-26" / "lite" / "clean" / "rank-0.pt.trace.json.gz")],
    "diff": ["diff", str(AB / "clean_1"), str(AB / "item_logging")],
}


@pytest.fixture(scope="module")
def perflog(tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "PERFLOG.md"
    for run, change in ((AB / "clean_1", "baseline"), (AB / "item_logging", "plant .item() logging in the loop")):
        result = CliRunner().invoke(cli, ["log", "add", str(run), "--change", change, "--log", str(log)])
        assert result.exit_code == 0, result.output
    return log


def run(args: list[str], width: int) -> list[str]:
    result = CliRunner().invoke(cli, args, env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", COMMANDS)
def test_command_tables_fit(name, width):
    lines = run(COMMANDS[name], width)
    assert check(lines, width) >= 3
    if name == "analyze dlrm":  # the collectives' names stay whole (they were cut `all_to_...`)
        text = "\n".join(lines)
        assert "│ all_to_all │" in text and "│ all_reduce │" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_log_tables_fit(perflog, width):
    shown = run(["log", "show", "--log", str(perflog)], width)
    assert check(shown, width) == 1
    text = "\n".join(shown)
    assert "Itera…" not in text and "Env-s…" not in text and "2026-…" not in text
    rows = tables(shown)[0][1]
    assert [r[0] for r in rows] == ["2", "1"]  # a line per row: nothing wrapped
    assert rows[0][2 if width == 80 else 3].endswith("item_logging")  # the run's folder stays whole
    if width > 80:  # the date and time, whole
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", rows[0][1])
    compared = run(["log", "compare", "1", "2", "--log", str(perflog)], width)
    assert check(compared, width) == 1
    fields = [r[0] for r in tables(compared)[0][1] if r[0]]
    assert fields[:2] == ["Iteration (ms)", "Env-steps/s"] and "Host reads/iter" in fields
