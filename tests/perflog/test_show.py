"""The performance log in the terminal: `describe`'s one line, `log show`'s table (newest
first, long kernel names cut, markup shown as text) and `log compare`'s side-by-side table with
spreads, signed deltas, ratios and verdicts."""
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


def printed(render, *args) -> str:
    console = Console(file=io.StringIO(), width=250, color_system=None)
    render(*args, console)
    return console.file.getvalue()


def test_describe_is_one_line_formatted_as_in_the_table():
    assert describe(A) == ("id 1 (2026-11-20): Iteration (ms) 10.00, Env-steps/s 1,000, GPU busy % 50.0, "
                           "Syncs/iter 4.00, Memcpy HtoD (ms) 2.000")
    assert describe({"id": 3, "date": "2026-11-22", "iteration_ms": 1234.5}) == \
        "id 3 (2026-11-22): Iteration (ms) 1,234.50"


def test_rows_newest_first_by_their_id_with_long_kernels_cut():
    out = printed(render_rows, [B, A])
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[0].startswith("Performance log (newest first)")
    assert lines[1].split("┃")[0].strip() == "#"  # one numbering: the id, as `log compare` takes it
    first, second = (next(line for line in lines if line.lstrip().startswith(f"{n} ")) for n in (2, 1))
    assert first.lstrip().startswith("2 │ 2026-11-21") and second.lstrip().startswith("1 │ 2026-11-20")
    assert lines.index(first) < lines.index(second)
    assert "fused [bold]adam[/bold]" in first  # shown as written, not read as markup
    assert "k" * 59 + "…" in first and "k" * 60 not in out


def test_comparison_shows_spreads_signed_deltas_ratios_and_verdicts():
    out = printed(render_comparison, A, B, compare_rows(A, B))
    assert "A: id 1 2026-11-20 baseline (t.json)" in out
    assert "B: id 2 2026-11-21 fused [bold]adam[/bold] (t.json)" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()}
    assert [c.strip() for c in rows["iteration_ms"].split("│")[1:]] == \
        ["10.00 (9.50-10.50, n 5)", "8.00 (7.50-8.25, n 5)", "-2.00", "0.800x", "better"]
    assert [c.strip() for c in rows["env_steps_per_s"].split("│")[1:]] == \
        ["1,000", "1,250", "+250", "1.250x", "no spread recorded"]
    assert [c.strip() for c in rows["top_kernel"].split("│")[1:]] == ["k1", "k" * 59 + "…", "", "", "changed"]


def test_log_compare_and_show_commands(tmp_path, capsys):
    log = tmp_path / "PERFLOG.md"
    append(measured(), "baseline", log)
    append(measured(iteration_ms=8.0, env_steps_per_s=1250.0, gpu_busy_pct=60.0,
                    syncs_per_iteration=0.0, top_kernel="k2", top_kernel_pct=25.0,
                    memcpy_htod_ms=1.0), "no .item()", log)
    code, out, _ = run_main(["log", "compare", "1", "2", "--log", str(log)], capsys)
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines() if line.split()}
    assert "-2.00" in lines["iteration_ms"] and "0.800x" in lines["iteration_ms"] and "no spread recorded" in lines["iteration_ms"]
    assert "+250" in lines["env_steps_per_s"] and "1.250x" in lines["env_steps_per_s"]
    assert "-4.00" in lines["syncs_per_iteration"] and "changed" in lines["top_kernel"]
    code, out, _ = run_main(["log", "show", "--log", str(log)], capsys)
    assert code == 0 and out.index("no .item()") < out.index("baseline")
