"""The HTML report's memory section: allocated and reserved over time per device (plotly) and the
per-device figures of analysis/memory/usage.py as a table. Registered in html.render_html; text from the
trace (phase and op names) is escaped here."""
from __future__ import annotations

import html

import pandas as pd

from ...analysis.gpu.compiled import display_name
from ...analysis.memory.usage import HOST, timeline
from ...analysis.recorder import record_full_advice
from ...units import bytes_text, device_key

MEMORY_TITLE = "Memory"
TOP_SITES = 8
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def memory_empty(a) -> str:
    return (f"No memory events: record them with {record_full_advice(a.trace)} to see allocated and "
            "reserved memory.")


def memory_figure(a):
    """Allocated (solid) and reserved (dotted, GPUs only) over time, one colour per device, in
    MiB against seconds from the trace's first memory event."""
    mem = a.memory
    if mem is None or not mem.recorded:
        return None
    import plotly.graph_objects as go

    fig = go.Figure()
    t0 = float(mem.events["ts"].min())
    for i, d in enumerate(mem.devices.itertuples()):
        line = timeline(mem, d.label)
        color = COLORS[i % len(COLORS)]
        x = (line["ts"] - t0) / 1e6
        note = "" if d.absolute else " (relative to the trace's start)"
        fig.add_trace(go.Scatter(x=x, y=line["allocated"] / 2**20, name=f"{d.label} allocated{note}",
                                 mode="lines", line=dict(color=color, shape="hv"),
                                 hovertemplate="%{x:.4f} s: %{y:,.1f} MiB allocated<extra></extra>"))
        if d.device_type != HOST and line["reserved"].notna().any():
            fig.add_trace(go.Scatter(x=x, y=line["reserved"] / 2**20, name=f"{d.label} reserved",
                                     mode="lines", line=dict(color=color, dash="dot", shape="hv"),
                                     hovertemplate="%{x:.4f} s: %{y:,.1f} MiB reserved<extra></extra>"))
    fig.update_layout(template="plotly_white", margin=dict(l=10, r=10, t=40, b=40), height=420,
                      xaxis_title="seconds since the first memory event", yaxis_title="MiB",
                      legend=dict(orientation="h", y=-0.2))
    return fig


def memory_table_html(a) -> str | None:
    """Per device: peaks, reserved ratio, allocations and growth per iteration; then the phases
    and ops that allocate most inside iterations."""
    mem = a.memory
    if mem is None or not mem.recorded:
        return None
    heads = ("device", "peak allocated", "peak reserved", "reserved / allocated",
             "allocations per iteration", "growth per iteration", "iterations")
    rows = []
    for d in mem.devices.itertuples():
        host = d.device_type == HOST
        rows.append([d.label, bytes_text(d.peak_allocated) + ("" if d.absolute else " (relative)"),
                     "n/a (host: no caching allocator)" if host else bytes_text(d.peak_reserved),
                     "-" if pd.isna(d.reserved_ratio) else f"{d.reserved_ratio:.2f}x",
                     "-" if pd.isna(d.allocations_per_iteration) else f"{d.allocations_per_iteration:,.0f}",
                     "-" if pd.isna(d.growth_per_iteration) else bytes_text(d.growth_per_iteration, signed=True),
                     str(d.iterations)])
    out = _table("Memory per device (host: tensors in host memory, not the process's RSS)", heads, rows)
    sites = mem.sites.head(TOP_SITES)
    if len(sites):
        site_rows = [[device_key(r.rank, r.device, host=r.device_type == HOST), display_name(r.phase), r.op, f"{r.per_iteration:,.1f}", bytes_text(r.median_bytes),
                      bytes_text(r.live_bytes)] for r in sites.itertuples()]
        out += _table("Allocations inside iterations by phase and op",
                      ("device", "phase", "op", "per iteration", "median size", "still live at end"),
                      site_rows)
    return out


def _table(caption: str, heads, rows) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in heads)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f'<table class="data"><caption>{html.escape(caption)}</caption><tr>{head}</tr>{body}</table>'
