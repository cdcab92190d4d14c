"""HTA's own breakdowns printed beside ours (`goodhart-prof analyze --hta`), in the reports' words:
each column HTA names with a unit gets a readable header and its figures in that unit (`8.78 ms`,
`98.5%`); a column HTA adds that is not known here is shown under its own name, as it is."""
from __future__ import annotations

import re

import pandas as pd
from rich.console import Console

from ...units import duration
from ..common import ROW_LIMIT, number, percent
from ...tables import Col, FittedTable

# HTA's column -> (header, kind): `us` microseconds, `pct` a percent already, `ratio` a 0..1 share.
COLUMNS = {
    "rank": ("rank", "text"), "stream": ("stream", "text"), "idle_category": ("idle cause", "text"),
    "kernel_time(us)": ("kernel time", "us"), "compute_time(us)": ("compute", "us"),
    "non_compute_time(us)": ("non-compute", "us"), "idle_time(us)": ("idle", "us"),
    "idle_time": ("idle time", "us"), "idle_time_ratio": ("share of idle", "ratio"),
    "compute_time_pctg": ("compute %", "pct"), "non_compute_time_pctg": ("non-compute %", "pct"),
    "idle_time_pctg": ("idle %", "pct"),
}
# A `<x>_time(us)` column shown with its `<x>_time_pctg` twin in one cell: `96 us (1.1%)` (HTA's
# percents are of its kernel_time(us), the sum of idle, compute and non-compute).
_TWIN = re.compile(r"^(\w+)_time\(us\)$")


def render_hta(frames: dict[str, pd.DataFrame], console: Console) -> None:
    """Each of HTA's breakdowns as a table (its first ROW_LIMIT rows)."""
    for title, frame in frames.items():
        console.print()
        columns = shown_columns(frame)
        shares = any(len(spec) > 2 for _, spec in columns)
        note = " (%: of HTA's kernel time)" if shares else ""
        table = FittedTable(f"HTA: {title}{note}", *(Col(header, right=spec[0] != "text" and not _names(frame, spec),
                                                         name=_names(frame, spec)) for header, spec in columns))
        for i in range(min(len(frame), ROW_LIMIT)):
            table.add_row(*[cell(frame, i, spec) for _, spec in columns])
        console.print(table)
        if len(frame) > ROW_LIMIT:
            console.print(f"... and {len(frame) - ROW_LIMIT} more rows")


def _names(frame: pd.DataFrame, spec: tuple[str, ...]) -> bool:
    """Whether a column holds names (text, cut to fit the console), not figures or ranks."""
    column = frame[spec[1]]
    return spec[0] in ("text", "raw") and spec[1] != "rank" and (
        column.dtype == object or pd.api.types.is_string_dtype(column))


def shown_columns(frame: pd.DataFrame) -> list[tuple[str, tuple[str, ...]]]:
    """(header, (kind, column[, twin percent column])) per column shown, in HTA's order; a percent
    column folded into its time column's cell is not shown again."""
    names = [str(c) for c in frame.columns]
    folded = set()
    out = []
    for name in names:
        if name in folded:
            continue
        header, kind = COLUMNS.get(name, (name, "raw"))
        twin = _TWIN.match(name)
        pct = f"{twin.group(1)}_time_pctg" if twin else None
        if pct in names:
            folded.add(pct)
            out.append((header, ("us", name, pct)))
        else:
            out.append((header, (kind, name)))
    return out


def cell(frame: pd.DataFrame, i: int, spec: tuple[str, ...]) -> str:
    """Row i's figure of one shown column (values read from their own column: a row of mixed
    types read as one Series would turn ranks into floats)."""
    kind, name = spec[0], spec[1]
    value = frame[name].iloc[i]
    if kind == "us":
        text = duration(value, significant=True)
        return f"{text} ({number(frame[spec[2]].iloc[i], 1)}%)" if len(spec) > 2 else text
    if kind == "pct":
        return f"{number(value, 1)}%"
    if kind == "ratio":
        return percent(value)
    if isinstance(value, str):
        return value
    if kind == "raw" and isinstance(value, float):
        return f"{value:,.3f}"
    return str(value)

