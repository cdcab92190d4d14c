"""The performance log in the terminal: one line for a row (`describe`), the rows as a table
(`log show`), and two rows side by side with their deltas and verdicts (`log compare`). Both
tables fit the console (goodhart_prof/tables.py: names cut, optional columns left out, no cell
wrapped). Values a user or a trace wrote are shown as text, never read as rich markup."""
from __future__ import annotations

from typing import Any

from ..tables import Col, fitted_table, safe_text
from ..textsafe import printable
from .compare import SPREAD_FIELDS
from .log_file import COLUMNS


def _shown(value: Any, fmt: str) -> str:
    return "" if value is None else fmt.format(value)


def describe(row: dict[str, Any]) -> str:
    """One line for a row: its id and figures, formatted as in the table."""
    fmt = {f: (h, fm) for f, h, fm in COLUMNS}
    figures = ", ".join(f"{fmt[f][0]} {_shown(row.get(f), fmt[f][1])}" for f in
                        ("iteration_ms", "env_steps_per_s", "gpu_busy_pct", "syncs_per_iteration",
                         "host_reads_per_iteration", "memcpy_htod_ms") if row.get(f) is not None)
    return f"id {row.get('id')} ({row.get('date')}): {figures}"


# (field, terminal header, drop rank, name cut): `log show`'s columns. Headers are the
# markdown's in fewer characters, on two lines where that keeps them whole; a column empty in
# every row (GPU figures of CPU runs) is left out; the names (change, trace, top kernel) are cut
# to what is left (goodhart_prof/tables.py), the trace keeping its run folder or file name.
SHOWN = (("id", "#", 0, None), ("date", "date", 2, None), ("change", "change", 0, "end"),
         ("trace", "trace", 0, "path"), ("iteration_ms", "ms/\niter", 0, None),
         ("env_steps_per_s", "env-\nsteps/s", 0, None), ("gpu_busy_pct", "GPU\nbusy %", 0, None),
         ("syncs_per_iteration", "syncs/\niter", 0, None), ("host_reads_per_iteration", "host\nreads/it", 0, None),
         ("top_kernel", "top kernel", 3, "middle"), ("top_kernel_pct", "its\nshare", 3, None),
         ("memcpy_htod_ms", "HtoD\n(ms)", 4, None))
NAME_WANT = 18  # names are cut to this before a figure is left out (at 100 columns a CPU run keeps its date)


def render_rows(rows: list[dict[str, Any]], console) -> None:
    fmt = {f: fm for f, _, fm in COLUMNS}
    cells = [[when(row) if field == "date" else _shown(row.get(field), fmt[field]) for field, *_ in SHOWN]
             for row in rows]
    kept = [i for i, (field, *_) in enumerate(SHOWN) if field == "id" or any(r[i] for r in cells)]
    cols = [Col(SHOWN[i][1], right=SHOWN[i][3] is None and SHOWN[i][0] != "date", name=SHOWN[i][3] is not None,
                drop=SHOWN[i][2], cut=SHOWN[i][3] or "middle", want=NAME_WANT) for i in kept]
    console.print(fitted_table("Performance log (newest first)", cols, [[r[i] for i in kept] for r in cells],
                               console.width))


def when(row: dict[str, Any]) -> str:
    """A row's date and time as `2026-11-27 07:01` (its `created` timestamp, local time of the
    append); its date alone for a row without one."""
    created = str(row.get("created") or "")
    return created[:16].replace("T", " ") if len(created) >= 16 else str(row.get("date") or "")


def render_comparison(a: dict[str, Any], b: dict[str, Any], fields: list[dict[str, Any]],
                      console) -> None:
    """`log compare`: the two rows named, then a row per field either has: A and B (each figure
    over its interval where one was recorded), the change, the ratio and the verdict."""
    for side, row in (("A", a), ("B", b)):
        console.print(f"[bold]{side}[/bold]: " + _plain(f"id {row.get('id')} {when(row)} "
                                                        f"{row.get('change')!s} ({row.get('trace')})"),
                      highlight=False)
    fmt = {f: (h, fm) for f, h, fm in COLUMNS}
    rows = []
    for r in fields:
        if r["a"] is None and r["b"] is None:  # a figure neither row has (GPU figures of CPU runs)
            continue
        header, f = fmt[r["field"]]
        delta = "" if r["delta"] is None else ("+" if r["delta"] > 0 else "") + f.format(r["delta"])
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.3f}x"
        verdict = r["verdict"] or ""
        style = {"better": "green", "worse": "red"}.get(verdict)
        rows.append((header, _shown(r["a"], f) + _spread_text(a, r["field"], f),
                     _shown(r["b"], f) + _spread_text(b, r["field"], f), delta, ratio,
                     safe_text(verdict, style=style) if style else verdict))
    cols = (Col("field", name=True), Col("A", True, name=True), Col("B", True, name=True),
            Col("change", True), Col("ratio", True, drop=1), Col("verdict"))
    console.print(fitted_table("", cols, rows, console.width))


def _spread_text(row: dict[str, Any], field: str, fmt: str) -> str:
    """`low-high, n N` on a line of its own for a field with a recorded interval, else nothing."""
    low, high, n = (row.get(f"{field}_{k}") for k in ("low", "high", "n"))
    if field not in SPREAD_FIELDS or low is None or high is None:
        return ""
    return f"\n{fmt.format(low)}-{fmt.format(high)}, n {n}"


def _plain(text: str) -> str:
    """A value for the terminal (a kernel name, a --change text, a path): control characters
    escaped (textsafe.printable), brackets shown rather than read as rich markup."""
    from rich.markup import escape
    return escape(printable(text))
