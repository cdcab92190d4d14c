"""The HTML report's "CUPTI counters" section (analysis/gpu/cupti.py): every counter per op and per
kernel, and the FLOPs the SASS counters give. Names from the trace are escaped here."""
from __future__ import annotations

import math

from ..common import kernel_name
from .common import data_table, esc

KEY = "cupti"
TITLE = "CUPTI counters"
ROWS = 20


def _num(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.0f}"


def cupti_section(a) -> str:
    c = a.cupti
    parts = [f'<section id="{KEY}"><h2>{esc(TITLE)}</h2>',
             f"<p>{c.ranges} kernel ranges with {len(c.counters)} counters. FLOPs from the SASS instruction "
             "counters (an FMA is 2); no FLOP/s: a range's duration includes the profiler's replay passes.</p>"]
    if not c.matched:
        parts.append(f'<p class="note">Per op: not shown: {esc(c.note)}.</p>')
    headers = ["ranges", "FLOPs", *c.counters]
    if c.matched and not c.ops.empty:
        parts.append(data_table("By op", ["op", *headers],
                                [[esc(r["op"]), str(int(r["ranges"])), _num(r["flops"]),
                                  *(_num(r[k]) for k in c.counters)] for _, r in c.ops.head(ROWS).iterrows()]))
    parts.append(data_table("By kernel", ["kernel", *headers],
                            [[esc(kernel_name(r["name"], 120)), str(int(r["ranges"])), _num(r["flops"]),
                              *(_num(r[k]) for k in c.counters)] for _, r in c.kernels.head(ROWS).iterrows()]))
    return "".join(parts) + "</section>"
