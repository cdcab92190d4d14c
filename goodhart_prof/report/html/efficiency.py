"""The HTML report's efficiency section (analysis/gpu/efficiency.py): a roofline scatter (arithmetic
intensity against achieved TFLOP/s, log-log, one point per op type and per compute kernel, with the
device's roofs where its peak is known) and the per-op-type table. Its own module: html.py holds
the other sections and registers this one."""
from __future__ import annotations

import html
from typing import Callable

import numpy as np
import pandas as pd

from ...analysis.recorder import record_full_advice
from ...analysis.gpu.efficiency import across_devices, device_kinds
from ...units import devices_text, duration
from ..common import number
from .common import wrap

TITLE = "Efficiency against the hardware (roofline)"
OP_COLOR, KERNEL_COLOR = "#1f77b4", "#ff7f0e"
ROOF_COLORS = ("#2ca02c", "#d62728", "#9467bd", "#8c564b", "#17becf", "#7f7f7f")
_LAYOUT = dict(template="plotly_white", margin=dict(l=10, r=10, t=40, b=40), font=dict(size=12),
               hoverlabel=dict(align="left"))


def efficiency_section(a, figure: Callable) -> str:
    """The whole `<section id="efficiency">`; `figure(fig, name)` embeds a plotly figure the way
    the rest of the page does (plotly.js once)."""
    eff = getattr(a, "efficiency", None)
    head = f'<section id="efficiency"><h2>{_esc(TITLE)}</h2>'
    if eff is None or (eff.ops.empty and not eff.unsized):
        return head + ('<p class="empty">No GEMM, convolution or attention op with recorded shapes '
                       f'(record them with <code>{_esc(record_full_advice(a.trace))}</code>).</p></section>')
    parts = [f'<p class="note">{_devices_note(eff)}</p>']
    fig = roofline_figure(eff)
    if fig is not None:
        parts.append(f'<div class="figure">{figure(fig, "roofline")}</div>')
    across = across_devices(eff)
    parts.append(_across_table(across) if not across.empty else _ops_table(eff.ops))
    if eff.unsized:
        parts.append('<p class="note">FLOPs unknown (shapes or scalar arguments not recorded): '
                     + ", ".join(f"<code>{_esc(op)}</code> x{n:,}" for op, n in eff.unsized.items()) + "</p>")
    return head + "".join(parts) + "</section>"


def roofline_figure(eff):
    """Intensity (FLOP/byte) against achieved TFLOP/s, log-log; the roofs min(peak, intensity x
    bandwidth) of each (device, dtype) whose peak is known."""
    ops = eff.ops[(eff.ops["tflops"] > 0) & (eff.ops["intensity"] > 0)]
    if ops.empty:
        return None
    import plotly.graph_objects as go
    kernels = eff.kernels[(eff.kernels["tflops"] > 0) & (eff.kernels["intensity"] > 0)].head(40)
    fig = go.Figure()
    for frame, label, color, key in ((kernels, "compute kernel", KERNEL_COLOR, "name"),
                                     (ops, "op type", OP_COLOR, "op")):
        if frame.empty:
            continue
        size = 8 + 22 * np.sqrt(frame["time_us"].to_numpy(float) / frame["time_us"].max())
        fig.add_trace(go.Scatter(
            x=frame["intensity"], y=frame["tflops"], mode="markers", name=label,
            marker=dict(size=size, color=color, opacity=0.7, line=dict(width=1, color="#333")),
            hovertext=[wrap(str(n)) for n in frame[key]],
            customdata=np.c_[frame["time_us"].to_numpy(float), frame["gbps"].to_numpy(float),
                             frame["pct_roof"].to_numpy(float)],
            hovertemplate="%{hovertext}<br>%{x:,.1f} FLOP/B, %{y:,.2f} TFLOP/s, %{customdata[1]:,.0f} GB/s"
                          "<br>time %{customdata[0]:,.1f} us, %{customdata[2]:.1f}% of the roof"
                          f"<extra>{label}</extra>"))
    lo = max(min(ops["intensity"].min(), kernels["intensity"].min() if len(kernels) else np.inf) / 4, 1e-3)
    hi = max(ops["intensity"].max(), kernels["intensity"].max() if len(kernels) else 0) * 4
    x = np.geomspace(lo, max(hi, lo * 10), 200)
    roofs = ops[ops["peak_tflops"].notna()].drop_duplicates(["peak_tflops", "peak_gbps", "dtype"])
    for i, r in enumerate(roofs.itertuples()):
        ridge = r.peak_tflops * 1e3 / r.peak_gbps
        xs = np.unique(np.append(x, ridge)) if lo < ridge < hi else x
        fig.add_trace(go.Scatter(
            x=xs, y=np.minimum(r.peak_tflops, xs * r.peak_gbps / 1e3), mode="lines",
            name=f"roof {r.dtype}: {r.peak_tflops:,.0f} TFLOP/s, {r.peak_gbps:,.0f} GB/s",
            line=dict(color=ROOF_COLORS[i % len(ROOF_COLORS)], dash="dash"), hoverinfo="skip"))
    fig.update_layout(**_LAYOUT, height=520, xaxis=dict(type="log", title="arithmetic intensity (FLOP/byte)"),
                      yaxis=dict(type="log", title="achieved TFLOP/s"), legend=dict(orientation="h", y=-0.18))
    return fig


def _devices_note(eff) -> str:
    parts = []
    for d, where in device_kinds(eff.devices):
        place = "the CPU (ops' own CPU time; no kernels)" if d.device < 0 else devices_text(where)
        peak = (f'peak: {_esc(d.peak_name)} (<a href="{_esc(d.source)}">datasheet</a>)' if d.peak_name
                else "peak unknown: no roofs, no percentages")
        parts.append(f"{place}: {_esc(d.device_name or 'unnamed device')}, {peak}")
    head = ("Achieved rate = the op's FLOPs over the summed time of the kernels it launched; "
            "bytes = its operands and result, each moved once.")
    return head + (" " + "; ".join(parts) + "." if parts else "")


def _ops_table(ops: pd.DataFrame) -> str:
    if ops.empty:
        return ""
    heads = ("rank/device", "op", "dtype", "count", "time", "GFLOP", "GB", "FLOP/B", "TFLOP/s", "GB/s",
             "% of peak", "% of roof", "bound")
    rows = []
    for r in ops.itertuples():
        where = "cpu" if r.device < 0 else f"{r.rank} / {r.device}"
        cells = (where, f"<code>{_esc(r.op)}</code>", _esc(r.dtype), f"{int(r.count):,}", duration(r.time_us),
                 f"{r.flops / 1e9:,.2f}", number(r.bytes / 1e9, 3), number(r.intensity, 1), number(r.tflops, 2),
                 number(r.gbps, 1), number(r.pct_peak, 1), number(r.pct_roof, 1), _esc(r.bound or "-"))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ('<table class="data"><caption>Roofline by op type</caption><tr>'
            + "".join(f"<th>{h}</th>" for h in heads) + "</tr>" + "".join(rows) + "</table>")


def _across_table(across: pd.DataFrame) -> str:
    """The ops summed over the devices of each model (efficiency.across_devices), TFLOP/s with the
    devices' own range."""
    heads = ("op", "dtype", "device", "devices", "count", "time", "GFLOP", "GB", "FLOP/B", "TFLOP/s",
             "each device's TFLOP/s", "GB/s", "% of peak", "% of roof", "bound")
    rows = []
    for r in across.itertuples():
        cells = (f"<code>{_esc(r.op)}</code>", _esc(r.dtype), _esc(r.model), f"{int(r.devices):,}",
                 f"{int(r.count):,}", duration(r.time_us), f"{r.flops / 1e9:,.2f}", number(r.bytes / 1e9, 3),
                 number(r.intensity, 1), number(r.tflops, 2), f"{number(r.tflops_low, 2)}-{number(r.tflops_high, 2)}",
                 number(r.gbps, 1), number(r.pct_peak, 1), number(r.pct_roof, 1), _esc(r.bound or "-"))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ('<table class="data"><caption>Roofline by op type, summed over the devices of each model</caption><tr>'
            + "".join(f"<th>{h}</th>" for h in heads) + "</tr>" + "".join(rows) + "</table>")



def _esc(value) -> str:
    return html.escape(str(value), quote=True)


def _label(text: str) -> str:
    return html.escape(str(text), quote=False)
