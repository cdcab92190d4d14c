"""The terminal report's CUPTI counters section (analysis/gpu/cupti.py): FLOPs and counters per op
and per kernel."""
from __future__ import annotations

import math
import re

from rich.console import Console

from ..common import kernel_name, plain
from ...tables import Col, FittedTable

ROWS = 10


def _flops(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value / 1e9:,.2f}"


def shown_kernel_names(names: list[str]) -> list[str]:
    """The report's short kernel names (`fft2d_r2c_32x32<...>`); where two different kernels would
    print alike, their full names without the return type (the table cuts them in the middle, so
    the part that differs stays)."""
    short = [kernel_name(n) for n in names]
    return [s if short.count(s) == 1 else re.sub(r"^void\s+", "", n) for s, n in zip(short, names)]


def _short(counters: list[str]) -> str:
    """The counters' names, their common prefix said once: `smsp__sass_thread_inst_executed_op_: dadd_pred_on.sum, ...`."""
    import os

    prefix = os.path.commonprefix(counters) if len(counters) > 1 else ""
    prefix = prefix[:prefix.rfind("_") + 1] if "_" in prefix else ""
    shown = [plain(c[len(prefix):]) for c in counters[:6]]
    more = f", +{len(counters) - 6} more" if len(counters) > 6 else ""
    return (f"{plain(prefix)}: " if prefix else "") + ", ".join(shown) + more


def cupti_section(a, console: Console) -> None:
    """Absent without CUPTI counters."""
    c = a.cupti
    if c is None:
        return
    console.print()
    console.print(f"[bold]CUPTI counters[/bold]: {c.ranges} kernel ranges, {len(c.counters)} counters "
                  f"({_short(c.counters)})", highlight=False)
    if c.flops_by_precision:
        parts = ", ".join(f"{k} {v / 1e9:,.2f} GFLOP" for k, v in c.flops_by_precision.items() if v)
        console.print(f"  FLOPs from the SASS instruction counters (FMA = 2): {parts}; no FLOP/s: a range's "
                      "duration includes the profiler's replay passes", highlight=False)
    if not c.matched:
        console.print(f"  per op: not shown: {plain(c.note)}", highlight=False)
    if c.matched and not c.ops.empty:
        table = FittedTable("By op (the op around each kernel's launch)", Col("op", name=True),
                            Col("kernels", True), Col("GFLOP", True))
        for r in c.ops.head(ROWS).itertuples():
            table.add_row(plain(r.op), f"{r.ranges:,}", _flops(r.flops))
        console.print(table)
    table = FittedTable("By kernel", Col("kernel", name=True), Col("ranges", True), Col("GFLOP", True))
    rows = c.kernels.head(ROWS)
    for r, name in zip(rows.itertuples(), shown_kernel_names(rows["name"].tolist())):
        table.add_row(plain(name), f"{r.ranges:,}", _flops(r.flops))
    console.print(table)
