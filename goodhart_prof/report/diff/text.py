"""The terminal report of `goodhart-prof diff`: rich tables of a `Comparison`, headline first.

Every row has a readable name, its values in their units and its verdict (`better`, `worse`,
`within noise`, `only in A`/`only in B`, `same` for an exact count, `not judged` with why);
every table fits the console (goodhart_prof/tables.py). The whole-trace tables are in diff_tables.py.
"""
from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.text import Text

from ...analysis.compare.summary import shown_rows
from . import tables as diff_tables
from ..common import plain
from ...units import duration
from .format import KIND_NAMES, item_names, interval, ratio_text, signed_text, summary_text, value_text
from ...tables import SEPARATOR, Col, fitted_table, safe_text, short_middle

BETTER_STYLE, WORSE_STYLE = "green", "red"
STACK_NAME = 20  # the name width below which the per-iteration tables put intervals under medians


def render(c, console: Console, top: int = 15) -> None:
    if c.recording_warning:
        console.print(f"[bold yellow]Warning[/bold yellow]: {plain(c.recording_warning)}", highlight=False)
    for side, analysis in (("A", c.a), ("B", c.b)):
        paths = analysis.trace.paths
        console.print(f"[bold]{side}[/bold]: {', '.join(plain(p) for p in paths[:3])}"
                      f"{' …' if len(paths) > 3 else ''}")
    if c.iterations_line:
        console.print(c.iterations_line, highlight=False)
    _summary(c, console)
    _headline(c, console, top)
    _noise(c, console, top)
    _counts(c, console)
    host_ops(c, console, top)
    diff_tables.render(c, console, top)


def _summary(c, console: Console) -> None:
    console.print()
    if not (c.summary.set_index("metric").loc["gpu_span_us", ["a", "b"]].fillna(0.0) > 0).any():
        console.print("Neither trace has GPU activity (CPU-only runs): the GPU figures are left out.")
    notes: list[str] = []
    rows = []
    for r in shown_rows(c.summary).itertuples():
        verdict = r.verdict
        if verdict == "not judged":
            if r.why not in notes:
                notes.append(r.why)
            verdict = f"not judged ({notes.index(r.why) + 1})"
        rows.append((r.name, summary_text(r.unit, r.a), summary_text(r.unit, r.b),
                     summary_text(r.unit, r.delta, signed=True), ratio_text(r.ratio, r.a), verdict))
    cols = (Col("figure", name=True), Col("A", True), Col("B", True), Col("change", True),
            Col("ratio", True, drop=1), Col("verdict"))
    console.print(fitted_table("Summary (change = B - A, ratio = B / A)", cols, rows, console.width))
    for i, why in enumerate(notes):
        console.print(f"({i + 1}) {why}", highlight=False)


def _fits_wide(cols, rows, width: int) -> bool:
    """Whether the table fits with each interval in its own column and names of STACK_NAME."""
    natural = [max([len(col.header)] + [len(str(row[i])) for row in rows]) for i, col in enumerate(cols)]
    return sum(min(w, STACK_NAME) if col.name else w for col, w in zip(cols, natural)
               if not col.drop) + SEPARATOR * (sum(not col.drop for col in cols) - 1) <= width


def _with_intervals(title: str, head: list, rows: list, tail: list, width: int, styles=None):
    """A table of (name, ..., median A, interval A, median B, interval B, ...): intervals in
    columns of their own when they fit, else each under its median in the same cell (never cut)."""
    cols = head + [Col("A", True), Col("A interval", True), Col("B", True), Col("B interval", True)] + tail
    n = len(head)
    if not any(row[n + 1] or row[n + 3] for row in rows):  # counts: no intervals to show
        cols = head + [Col("A", True), Col("B", True)] + tail
        return fitted_table(title, cols, [row[:n + 1] + row[n + 2:n + 3] + row[n + 4:] for row in rows],
                            width, styles)
    if _fits_wide(cols, rows, width) or not rows:
        return fitted_table(title, cols, rows, width, styles)
    stacked = [row[:n] + (_stack(row[n], row[n + 1]), _stack(row[n + 2], row[n + 3])) + row[n + 4:]
               for row in rows]
    cols = head + [Col("A (interval)", True), Col("B (interval)", True)] + tail
    return fitted_table(title, cols, stacked, width, styles)


def _absent(row: tuple, verdict: str, n: int) -> tuple:
    """A figure on one side only: `-` for the other side's median and no interval there."""
    side = {"only in A": n + 2, "only in B": n}.get(verdict)
    return row if side is None else row[:side] + ("-", "") + row[side + 2:]


def _stack(value: str, band: str):
    return Text.assemble(safe_text(value), "\n", safe_text(f"({band})")) if band else value


def _headline(c, console: Console, top: int) -> None:
    console.print()
    console.print(f"[bold]Machine speed[/bold]: {c.speed_check}", highlight=False)
    if c.time_statement:
        console.print(f"[bold]Time[/bold]: {c.time_statement}", highlight=False)
    for verdict, frame, style in (("better", c.better, BETTER_STYLE), ("worse", c.worse, WORSE_STYLE)):
        console.print()
        if frame.empty:
            console.print(f"[bold {style}]What got {verdict}[/bold {style}]: nothing")
            continue
        shown = frame.head(top)
        rows = [(name, KIND_NAMES.get(r.kind, r.kind), value_text(r.metric, r.a),
                 interval(r.metric, r.low_a, r.high_a), value_text(r.metric, r.b),
                 interval(r.metric, r.low_b, r.high_b), signed_text(r.metric, r.delta),
                 ratio_text(r.ratio, r.a), duration(r.impact_us))
                for name, r in zip(item_names(shown), shown.itertuples())]
        console.print(_with_intervals(
            f"What got {verdict} ({min(top, len(frame))} of {len(frame)}, by impact)",
            [Col("item", name=True), Col("kind", drop=2)], rows,
            [Col("change", True), Col("ratio", True, drop=1), Col("impact", True, drop=1)],
            console.width, styles=[style] * len(rows)))
    noise = c.within_noise
    if len(noise):
        names = [n if r.kind in ("iteration", "throughput", "phase") else
                 f"{KIND_NAMES.get(r.kind, r.kind)} {short_middle(n, 50)}"
                 for n, r in zip(item_names(noise), noise.itertuples())]
        more = f" and {len(names) - top} more" if len(names) > top else ""
        console.print()
        console.print(f"[bold]within noise[/bold]: {plain(', '.join(names[:top]))}{more} (intervals overlap)",
                      highlight=False)


def _noise(c, console: Console, top: int) -> None:
    """Every time figure with its median and interval per side (kernels: the top ones)."""
    spread = c.spread
    if spread is None or spread.empty:
        return
    shown = pd.concat([spread[spread["kind"] != "kernel"], spread[spread["kind"] == "kernel"].head(top)])
    rows = [_absent((name, KIND_NAMES.get(r.kind, r.kind), value_text(r.metric, r.a),
                     interval(r.metric, r.low_a, r.high_a), value_text(r.metric, r.b),
                     interval(r.metric, r.low_b, r.high_b), signed_text(r.metric, r.delta), r.verdict),
                    r.verdict, 2)
            for name, r in zip(item_names(shown), shown.itertuples())]
    console.print()
    console.print(_with_intervals("Per iteration: median and interval over the counted iterations",
                                  [Col("figure", name=True), Col("kind", drop=2)], rows,
                                  [Col("change", True, drop=1), Col("verdict")], console.width))


def _counts(c, console: Console) -> None:
    """Exact counts: sync points and host reads per kind, GPU kernels (per iteration when both
    sides have counted iterations)."""
    counts = c.counts
    if counts is None or counts.empty:
        return
    per_it = bool(counts["per_iteration"].iloc[0])
    metric = "count_per_iteration" if per_it else "count"
    rows = [(str(r.item), KIND_NAMES.get(r.kind, r.kind), value_text(metric, r.a), value_text(metric, r.b),
             signed_text(metric, r.delta), r.verdict if isinstance(r.verdict, str) else "same",
             r.site if isinstance(r.site, str) else "")
            for r in counts.itertuples()]
    cols = (Col("kind"), Col("what", drop=1), Col("A", True), Col("B", True), Col("change", True),
            Col("verdict"), Col("site (changed most)", name=True))
    console.print()
    console.print(fitted_table(f"Counts {'per iteration' if per_it else '(whole traces)'} (exact)", cols,
                               rows, console.width))


def host_ops(c, console: Console, top: int) -> None:
    """Host ops by name: self time per counted iteration (median, interval) and verdict; the
    judged changes first, then the largest."""
    h = c.host_ops
    if h is None or h.empty:
        return
    changed = h[h["verdict"].isin(["better", "worse"])]
    moved = (changed["median_b"] - changed["median_a"]).abs().to_numpy()
    order = pd.concat([changed.iloc[(-moved).argsort(kind="stable")],
                       h[~h["verdict"].isin(["better", "worse"])]]).head(top)
    per_it = bool(order["median_a"].notna().any() or order["median_b"].notna().any())
    a_col, b_col = ("median_a", "median_b") if per_it else ("self_us_a", "self_us_b")
    rows = [_absent((str(r.name), value_text("time_us", getattr(r, a_col)), interval("time_us", r.low_a, r.high_a),
                     value_text("time_us", getattr(r, b_col)), interval("time_us", r.low_b, r.high_b),
                     signed_text("time_us", getattr(r, b_col) - getattr(r, a_col)),
                     f"{r.calls_a:,}", f"{r.calls_b:,}", r.verdict), r.verdict, 1)
            for r in order.itertuples()]
    what = "self time per iteration (median)" if per_it else "self time (whole traces)"
    console.print()
    console.print(_with_intervals(f"Host ops: {what}, {len(order)} of {len(h)} (changes first)",
                                  [Col("op", name=True)], rows,
                                  [Col("change", True, drop=1), Col("calls A", True, drop=2),
                                   Col("calls B", True, drop=2), Col("verdict")], console.width))

