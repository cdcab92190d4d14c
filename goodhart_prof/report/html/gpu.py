"""The HTML report's GPU figures: GPU time by kernel category and library, the top kernels, each
device's utilization timeline with its largest idle gaps, and the idle gaps by duration bin.

Each function reads the `Analysis` tables and returns a plotly Figure (None when its table is
empty); `html.py` puts them on the page. Text from the trace is escaped as in `html.py`.
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np
import pandas as pd

from ...analysis.gpu.burstiness import GAP_CLASSES
from ..common import capped, kernel_name, percent
from .common import LAYOUT as _LAYOUT
from ...units import device_text, duration_sig
from .common import esc as _esc
from .common import go as _go
from .common import label as _label
from .common import wrap as _wrap

TOP_KERNELS = 20
MARKED_GAPS = 40  # largest idle gaps shaded per device on the timeline

CATEGORY_COLORS = {
    "gemm": "#1f77b4", "attention": "#9467bd", "conv": "#17becf", "norm": "#bcbd22",
    "scatter_gather": "#d62728", "reduction": "#ff7f0e", "elementwise": "#2ca02c",
    "copy": "#aec7e8", "sort": "#c5b0d5", "communication": "#8c564b", "memcpy": "#e377c2",
    "memset": "#f7b6d2", "other": "#7f7f7f",
}
GAP_COLORS = {"host_wait": "#d62728", "launch": "#ff7f0e", "other": "#7f7f7f"}


def category_figure(a):
    """GPU time (ms) per kernel category, largest first."""
    cats = a.categories
    if cats is None or cats.empty:
        return None
    go = _go()
    cats = cats.iloc[::-1]  # plotly draws the first bar at the bottom
    fig = go.Figure(go.Bar(
        x=cats["total_us"] / 1e3, y=cats["category"].astype(str), orientation="h",
        marker_color=[CATEGORY_COLORS.get(str(c), "#7f7f7f") for c in cats["category"]],
        text=[f"{p:.1f}%" for p in cats["pct"]], textposition="auto",
        customdata=np.c_[cats["count"].to_numpy(), cats["pct"].to_numpy()],
        hovertemplate="%{y}: %{x:,.3f} ms, %{customdata[1]:.1f}% of GPU time, "
                      "%{customdata[0]:,} activities<extra></extra>"))
    fig.update_layout(**_LAYOUT, height=120 + 28 * len(cats), xaxis_title="GPU time (ms)",
                      showlegend=False)
    return fig


def library_table_html(a) -> str | None:
    """GPU time per kernel library (where the kernels come from), largest first."""
    libs = getattr(a, "libraries", None)
    if libs is None or libs.empty:
        return None
    head = "".join(f"<th>{h}</th>" for h in ("library", "count", "total", "share"))
    body = "".join(f"<tr><td>{_esc(str(r.library))}</td><td>{int(r.count):,}</td>"
                   f"<td>{duration_sig(r.total_us)}</td><td>{r.pct:.1f}%</td></tr>"
                   for r in libs.itertuples())
    return f'<table class="data"><caption>GPU time by kernel library</caption><tr>{head}</tr>{body}</table>'


def kernel_figure(a, top: int = TOP_KERNELS):
    """The top kernels by total time, one bar each, coloured by category."""
    k = a.kernels
    if k is None or k.empty:
        return None
    go = _go()
    k = k.head(top).reset_index(drop=True)
    libs = k["library"].astype(str) if "library" in k else pd.Series([""] * len(k))
    labels = [f"{i + 1}. {kernel_name(n, 70)}" + (f" [{lib}]" if lib else "")
              for i, (n, lib) in enumerate(zip(k["name"].astype(str), libs))]
    fig = go.Figure()
    for cat in dict.fromkeys(k["category"].astype(str)):  # first-seen order for the legend
        sel = (k["category"].astype(str) == cat).to_numpy()
        rows = k[sel]
        fig.add_trace(go.Bar(
            x=rows["total_us"] / 1e3, y=[_label(l) for l, s in zip(labels, sel) if s], orientation="h",
            name=cat, marker_color=CATEGORY_COLORS.get(cat, "#7f7f7f"),
            hovertext=[_wrap(n) for n in rows["name"].astype(str)],
            customdata=np.c_[rows["count"].to_numpy(), rows["mean_us"].to_numpy(), rows["pct"].to_numpy()],
            hovertemplate="%{hovertext}<br>%{x:,.3f} ms total, %{customdata[0]:,} calls, mean "
                          "%{customdata[1]:,.1f} us, %{customdata[2]:.1f}% of GPU time"
                          f"<extra>{_label(cat)}</extra>"))
    fig.update_layout(**_LAYOUT, height=140 + 26 * len(k), xaxis_title="total GPU time (ms)",
                      barmode="stack", legend=dict(title_text="category", traceorder="normal"),
                      yaxis=dict(categoryorder="array", categoryarray=[_label(l) for l in labels[::-1]],
                                 automargin=True))
    return fig


def timeline_figure(a, marked: int = MARKED_GAPS):
    """Per device: window utilization over time (ms since the device's first activity), with the
    largest idle gaps shaded and marked by class."""
    devices = [b for b in a.burstiness if len(b.window_starts)]
    if not devices:
        return None
    # a subplot per device: past ROW_LIMIT only the devices with the most idle time in gaps
    devices = [devices[i] for i in capped([(b.gaps or {}).get("total_us") or 0.0 for b in devices])]
    go, make_subplots = _go(), _subplots()
    titles = [_device_title(a, b) for b in devices]
    fig = make_subplots(rows=len(devices), cols=1, subplot_titles=titles, vertical_spacing=
                        min(0.12, 0.35 / max(1, len(devices) - 1)) if len(devices) > 1 else 0.1)
    legend_done: set[str] = set()
    for row, b in enumerate(devices, start=1):
        origin, span_us = _first_activity(a, b)
        x = (np.asarray(b.window_starts, float) - origin) / 1e3
        end = min(x[-1] + b.window_us / 1e3, span_us / 1e3)  # the last window stops at the span's end
        for cls, gaps in _largest_gaps(b.gap_table, marked):
            starts = (gaps["start"].to_numpy(float) - origin) / 1e3
            ends = (gaps["end"].to_numpy(float) - origin) / 1e3
            show = cls not in legend_done
            legend_done.add(cls)
            rect_x, rect_y = _rectangles(starts, ends, 100.0)
            fig.add_trace(go.Scatter(
                x=rect_x, y=rect_y, fill="toself",
                mode="none", fillcolor=_alpha(GAP_COLORS[cls], 0.22), hoverinfo="skip",
                legendgroup=cls, showlegend=False), row=row, col=1)
            fig.add_trace(go.Scatter(
                x=(starts + ends) / 2, y=np.full(len(starts), 103.0), mode="markers",
                marker=dict(symbol="triangle-down", size=9, color=GAP_COLORS[cls]),
                name=f"gap: {cls}", legendgroup=cls, showlegend=show,
                customdata=np.c_[gaps["dur_us"].to_numpy(float) / 1e3, starts],
                hovertemplate=f"{cls} gap: " + "%{customdata[0]:,.3f} ms at %{customdata[1]:,.3f} ms"
                              "<extra></extra>"), row=row, col=1)
        fig.add_trace(go.Scatter(
            x=np.r_[x, end], y=np.r_[np.asarray(b.window_util, float), b.window_util[-1]] * 100,
            mode="lines", line=dict(shape="hv", color="#1f77b4", width=1.5), fill="tozeroy",
            fillcolor=_alpha("#1f77b4", 0.25), name="utilization per window",
            legendgroup="util", showlegend=row == 1,
            hovertemplate="%{x:,.3f} ms: %{y:.1f}% busy<extra></extra>"), row=row, col=1)
        fig.update_yaxes(range=[0, 110], title_text="busy %", row=row, col=1)
    fig.update_xaxes(title_text="ms since the device's first GPU activity", row=len(devices), col=1)
    fig.update_layout(**_LAYOUT, height=140 + 230 * len(devices),
                      legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0, xanchor="left"))
    fig.update_layout(margin=dict(t=80))
    return fig


def gap_histogram_figure(a):
    """Idle gaps of all devices in log-scaled duration bins, stacked by class: how many, and how
    much idle time each bin holds."""
    # the devices' gap arrays stacked (a DataFrame per device cost ~3 ms: 20,000 ranks, a minute)
    kept = [b for b in a.burstiness if len(b.gap_start)]
    if not kept:
        return None
    dur = np.concatenate([b.gap_dur for b in kept]).astype(float)
    cls_of = np.asarray(GAP_CLASSES, dtype=object)[np.concatenate([b.gap_cls for b in kept])]
    edges = _log_edges(dur[dur > 0])
    if edges is None:
        return None
    go, make_subplots = _go(), _subplots()
    labels = [f"{duration_sig(lo)}-{duration_sig(hi)}" for lo, hi in zip(edges[:-1], edges[1:])]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("gaps per duration bin", "idle time per duration bin (ms)"))
    for cls, color in GAP_COLORS.items():
        d = dur[cls_of == cls]
        d = np.clip(d, edges[0], edges[-1])
        counts, _ = np.histogram(d, edges)
        time_ms, _ = np.histogram(d, edges, weights=d / 1e3)
        for row, values, fmt in ((1, counts, "%{y:,} gaps"), (2, time_ms, "%{y:,.3f} ms")):
            fig.add_trace(go.Bar(x=labels, y=values, name=cls, marker_color=color, legendgroup=cls,
                                 showlegend=row == 1,
                                 hovertemplate=f"{cls}, %{{x}}: {fmt}<extra></extra>"), row=row, col=1)
    fig.update_layout(**_LAYOUT, height=560, barmode="stack",
                      legend=dict(title_text="gap class", traceorder="normal"))
    fig.update_xaxes(title_text="gap duration (bins on a log scale)", row=2, col=1)
    fig.update_yaxes(title_text="gaps", row=1, col=1)
    fig.update_yaxes(title_text="ms", row=2, col=1)
    return fig


def gap_note(a) -> str:
    n = len(a.burstiness)
    return (f"The idle gaps of {'all ' + str(n) + ' devices' if n > 1 else 'the device'} together, in "
            "duration bins of 1-2-5 per decade: how many fall in each bin (top) and how much idle "
            "time they add up to (bottom), stacked by class.")


def _subplots():
    from plotly.subplots import make_subplots
    return make_subplots


def _device_title(a, b) -> str:
    util = a.gpu[(a.gpu["rank"] == b.rank) & (a.gpu["device"] == b.device)]["utilization"] \
        if a.gpu is not None and not a.gpu.empty else pd.Series(dtype=float)
    parts = [device_text(b.rank, b.device)]
    if len(util):
        parts.append(f"busy {percent(float(util.iloc[0]))}")
    if b.util_cv is not None:
        parts.append(f"util CV {b.util_cv:.2f}")
    if b.burstiness_B is not None:
        parts.append(f"B {b.burstiness_B:+.2f}")
    count = (b.gaps or {}).get("count", 0)
    parts.append(f"{count:,} gaps")
    return " · ".join(parts)


def _first_activity(a, b) -> tuple[float, float]:
    """The device's first activity start and span (the gpu table's; window 0 starts there too)."""
    if a.gpu is not None and {"first_ts", "span_us"} <= set(a.gpu.columns):
        row = a.gpu[(a.gpu["rank"] == b.rank) & (a.gpu["device"] == b.device)]
        if len(row):
            return float(row["first_ts"].iloc[0]), float(row["span_us"].iloc[0])
    return float(b.window_starts[0]), len(b.window_starts) * float(b.window_us)


def _largest_gaps(gaps: pd.DataFrame | None, n: int) -> Iterable[tuple[str, pd.DataFrame]]:
    if gaps is None or gaps.empty:
        return []
    top = gaps.nlargest(n, "dur_us")
    cls = top["cls"].astype(str)
    return [(c, top[(cls == c).to_numpy()]) for c in GAP_COLORS if (cls == c).any()]


def _rectangles(starts: np.ndarray, ends: np.ndarray, top: float) -> tuple[list, list]:
    """x, y of closed rectangles [start, end] x [0, top], separated by None (one trace, many shapes)."""
    xs: list = []
    ys: list = []
    for s, e in zip(starts.tolist(), ends.tolist()):
        xs += [s, s, e, e, s, None]
        ys += [0, top, top, 0, 0, None]
    return xs, ys


def _log_edges(dur: np.ndarray) -> np.ndarray | None:
    """Bin edges 1-2-5 per decade covering dur (trimmed to the occupied range)."""
    if not len(dur):
        return None
    lo, hi = math.floor(math.log10(dur.min())), math.ceil(math.log10(dur.max()))
    edges = np.array([m * 10.0 ** e for e in range(lo, hi + 1) for m in (1, 2, 5)])
    first = max(0, int(np.searchsorted(edges, dur.min(), side="right")) - 1)
    last = int(np.searchsorted(edges, dur.max(), side="left"))
    edges = edges[first:max(last, first + 1) + 1]
    return edges if len(edges) >= 2 else None


def _alpha(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"
