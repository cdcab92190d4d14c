"""report/diff/text.py: the terminal report of `diff`. Readable names and units instead of keys, the
not-judged notes numbered under the summary, the headline, a figure on one side only, intervals
in their own columns or under their medians on a narrow console, host ops with changes first.

Fixtures: tests/data/ours/ab/{clean_1,item_logging} (SOURCES.md: the second reads `.item()` 8 more
times per iteration) and a hand-made pair (tests/support/diffs.py)."""
from __future__ import annotations

import io

import pytest

from goodhart_prof.report.common import SafeConsole
from goodhart_prof.report.diff.text import host_ops, render
from tests.support.diffs import ab_comparison, phase_pair


@pytest.fixture(scope="module")
def planted():
    """clean_1 (A) against item_logging (B)."""
    return ab_comparison()


def console(width: int) -> tuple[SafeConsole, io.StringIO]:
    out = io.StringIO()
    return SafeConsole(file=out, width=width, color_system=None), out


def text(c, width: int, top: int = 15) -> str:
    con, out = console(width)
    render(c, con, top=top)
    return out.getvalue()


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("│")]


def test_text_says_verdicts_and_units_not_keys(planted):
    out = text(planted, 100)
    assert "iteration_us" not in out and "sync_wait_us" not in out
    line = next(x for x in out.splitlines() if x.startswith("iteration time "))
    assert "47.835 ms" in line and "46.880 ms" in line and "within noise" in line
    assert "better" not in line
    wait = next(x for x in out.splitlines() if x.startswith("sync host wait "))
    assert wait.rstrip().endswith("not judged (1)")  # and why, under the table
    assert "(1) a whole-trace figure with no per-iteration samples: noise cannot be told apart" in out
    assert "What got better: nothing" in out
    # the planted reads: 22 -> 30 per iteration, worse, named with their site
    worse = next(x for x in out.splitlines() if x.startswith("item at rollout"))
    assert "22.00/it" in worse and "30.00/it" in worse
    # a CPU-only pair: no GPU columns of zeros anywhere
    assert "GPU A" not in out and "GPU busy time" not in out


def test_a_phase_on_one_side_has_no_median_there(tmp_path):
    """Counted steps 1010, 990, 1005, 995 us on both sides; a 200 us `logging` in B's only."""
    out = text(phase_pair(tmp_path), 120)
    lines = out.splitlines()
    iteration = next(x for x in lines if x.startswith("iteration time ") and "interval" not in x and "0.99" in x)
    assert cells(iteration) == ["iteration time", "iteration", "1.000 ms", "0.99-1.01 ms", "1.000 ms", "0.99-1.01 ms",
                                "0.0 us", "within noise"]
    logging = next(x for x in lines if x.startswith("logging ") and "only in B" in x)
    assert cells(logging) == ["logging", "phase", "-", "", "200.0 us", "200-200 us", "+200.0 us", "only in B"]
    assert "What got worse: nothing" in out  # a phase on one side only is never better or worse
    assert out.index("(1) a whole-trace figure") < out.index("(2) neither higher nor lower is better")


def test_intervals_stack_under_medians_when_narrow(planted):
    wide = text(planted, 160)
    assert "A interval" in wide and "(36.7-58.7 ms)" not in wide
    narrow = text(planted, 80).splitlines()
    at = next(i for i, x in enumerate(narrow) if x.startswith("iteration time ") and "47.849 ms" in x)
    assert cells(narrow[at + 1]) == ["", "(36.7-58.7 ms)", "(45.5-48.7 ms)", ""]
    assert max(len(x) for x in narrow) <= 80


def test_host_ops_changes_first_by_how_far_they_moved(planted):
    con, out = console(160)
    host_ops(planted, con, top=3)
    lines = out.getvalue().splitlines()
    assert lines[1].rstrip() == f"Host ops: self time per iteration (median), 3 of {len(planted.host_ops)} (changes first)"
    names = [cells(x)[0] for x in lines if x.startswith("aten::")]
    h = planted.host_ops.set_index("name")
    moved = (h["median_b"] - h["median_a"]).abs()
    assert names[:2] == sorted(["aten::mean", "aten::div_"], key=lambda n: -moved[n])
    assert h.at[names[2], "verdict"] not in ("better", "worse")
