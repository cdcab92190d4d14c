"""The performance log in the terminal: one line for a row (`describe`), the rows as a rich table
(`log show`), and two rows side by side with their deltas and verdicts (`log compare`). Values a
user or a trace wrote are shown as text, never read as rich markup."""
from __future__ import annotations

from typing import Any

from ..textsafe import printable
from .compare import SPREAD_FIELDS
from .log_file import COLUMNS, KERNEL_WIDTH


def _shown(value: Any, fmt: str) -> str:
    return "" if value is None else fmt.format(value)


def describe(row: dict[str, Any]) -> str:
    """One line for a row: its id and figures, formatted as in the table."""
    fmt = {f: (h, fm) for f, h, fm in COLUMNS}
    figures = ", ".join(f"{fmt[f][0]} {_shown(row.get(f), fmt[f][1])}" for f in
                        ("iteration_ms", "env_steps_per_s", "gpu_busy_pct", "syncs_per_iteration",
                         "host_reads_per_iteration", "memcpy_htod_ms") if row.get(f) is not None)
    return f"id {row.get('id')} ({row.get('date')}): {figures}"


def render_rows(rows: list[dict[str, Any]], console) -> None:
    from rich.table import Table

    table = Table(title="Performance log (newest first)", title_justify="left", title_style="bold",
                  show_edge=False, pad_edge=False)
    for field, header, _ in COLUMNS:
        right = field == "id" or field.endswith(("_ms", "_s", "_pct", "_iteration"))
        table.add_column(header, justify="right" if right else "left",
                         overflow="fold" if field in ("change", "trace", "top_kernel") else "ellipsis")
    for row in rows:
        values = dict(row)
        kernel = values.get("top_kernel")
        if kernel and len(kernel) > KERNEL_WIDTH:
            values["top_kernel"] = kernel[: KERNEL_WIDTH - 1] + "…"
        table.add_row(*(_plain(_shown(values.get(f), fmt)) for f, _, fmt in COLUMNS))
    console.print(table)


def render_comparison(a: dict[str, Any], b: dict[str, Any], fields: list[dict[str, Any]],
                      console) -> None:
    from rich.table import Table

    for side, row in (("A", a), ("B", b)):
        console.print(f"[bold]{side}[/bold]: " + _plain(f"id {row.get('id')} {row.get('date')} "
                                                        f"{row.get('change')!s} ({row.get('trace')})"),
                      highlight=False)
    fmt = {f: fm for f, _, fm in COLUMNS}
    table = Table(show_edge=False, pad_edge=False)
    for col, right in (("field", False), ("A", True), ("B", True), ("delta (B - A)", True),
                       ("ratio (B / A)", True), ("", False)):
        table.add_column(col, justify="right" if right else "left")
    for r in fields:
        f = fmt[r["field"]]
        delta = "" if r["delta"] is None else ("+" if r["delta"] > 0 else "") + f.format(r["delta"])
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.3f}x"
        style = {"better": "green", "worse": "red"}.get(r["verdict"], "")
        verdict = f"[{style}]{r['verdict']}[/{style}]" if style else (r["verdict"] or "")
        table.add_row(r["field"], _plain(_short(_shown(r["a"], f))) + _spread_text(a, r["field"], f),
                      _plain(_short(_shown(r["b"], f))) + _spread_text(b, r["field"], f), delta, ratio,
                      verdict)
    console.print(table)


def _spread_text(row: dict[str, Any], field: str, fmt: str) -> str:
    """` (low-high, n N)` for a field with a recorded interval, else nothing."""
    low, high, n = (row.get(f"{field}_{k}") for k in ("low", "high", "n"))
    if field not in SPREAD_FIELDS or low is None or high is None:
        return ""
    return f" ({fmt.format(low)}-{fmt.format(high)}, n {n})"


def _plain(text: str) -> str:
    """A value for the terminal (a kernel name, a --change text, a path): control characters
    escaped (textsafe.printable), brackets shown rather than read as rich markup."""
    from rich.markup import escape
    return escape(printable(text))


def _short(text: str, width: int = KERNEL_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
