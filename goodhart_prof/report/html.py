"""The HTML report: one self-contained file of plotly charts (`goodhart-prof analyze --html FILE`).

Each chart is built by a small function that reads the `Analysis` tables and returns a plotly
Figure (None when its table is empty; the page then says why in a sentence). No figure computes
an analysis of its own: ranking, totals and classes come from `goodhart_prof.analysis`; here we
only pick the top rows, convert units and bin the gap durations for display.

plotly.js is embedded inline once, with the first figure, so the file opens offline. Every text
that comes from the trace (kernel names, sites, phase names, finding evidence) is escaped: with
`html.escape` in the page, and as HTML entities inside plotly labels (plotly.js renders a few
tags such as `<b>` in labels and decodes entities, so `&lt;` shows as `<`).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ..analysis.burstiness import GAP_CLASSES
from ..analysis.rules.savings import SEVERITY_SHARES
from .common import capped, kernel_name, more_rows, percent, refuse_overwrite, saving_text
from .html_common import LAYOUT as _LAYOUT
from .html_common import duration_sig
from .html_common import esc as _esc
from .html_common import go as _go
from .html_common import label as _label
from .html_common import wrap as _wrap
from . import html_ranks
from .html_host import (HOST_OPS_KEY, HOST_OPS_TITLE, SYNC_COLORS, TOP_SITES, host_ops_section,
                        phase_figure, phase_note, sync_iterations_figure, sync_note, sync_sites_figure)

# The figure functions and sizes the page is made of, wherever they live (tests call them here).
__all__ = ["write_html", "render_html", "category_figure", "kernel_figure", "timeline_figure",
           "gap_histogram_figure", "sync_sites_figure", "sync_iterations_figure", "phase_figure",
           "TOP_KERNELS", "TOP_SITES", "MARKED_GAPS", "SECTIONS"]
from .html_memory import MEMORY_TITLE, memory_empty, memory_figure, memory_table_html
from .html_efficiency import TITLE as EFFICIENCY_TITLE, efficiency_section


TOP_KERNELS = 20
MARKED_GAPS = 40  # largest idle gaps shaded per device on the timeline

# Section titles (ids are for links; tests look for the titles).
SECTIONS = {
    "categories": "GPU time by kernel category",
    "kernels": "Top kernels",
    "timeline": "GPU utilization timeline",
    "gaps": "Idle gaps by class",
    "idle": "Why the GPU idles",
    HOST_OPS_KEY: HOST_OPS_TITLE,
    "syncs": "Sync points",
    "phases": "Phases",
    html_ranks.KEY: html_ranks.TITLE,
    "memory": MEMORY_TITLE,
    "efficiency": EFFICIENCY_TITLE,
    "findings": "Findings",
}

CATEGORY_COLORS = {
    "gemm": "#1f77b4", "attention": "#9467bd", "conv": "#17becf", "norm": "#bcbd22",
    "scatter_gather": "#d62728", "reduction": "#ff7f0e", "elementwise": "#2ca02c",
    "copy": "#aec7e8", "sort": "#c5b0d5", "communication": "#8c564b", "memcpy": "#e377c2",
    "memset": "#f7b6d2", "other": "#7f7f7f",
}
GAP_COLORS = {"host_wait": "#d62728", "launch": "#ff7f0e", "other": "#7f7f7f"}
GAP_MEANING = {
    "host_wait": "the CPU launched the next work only after the GPU ran dry (CPU late)",
    "launch": "shorter than 30 us: launch overhead between queued kernels",
    "other": "work was queued but waited on something else (an event, another stream)",
}
SEVERITY_COLORS = {"high": "#c62828", "medium": "#ef6c00", "low": "#0277bd"}
_CONFIG = {"displaylogo": False, "responsive": True}


# -- entry point ------------------------------------------------------------------------------
def write_html(analysis, path: str | Path, force: bool = False) -> Path:
    """Write the report for `analysis` to `path` (temp file + rename); returns the path."""
    from ..fileio import writing

    path = refuse_overwrite(path, force)
    page = render_html(analysis)
    with writing(path) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return path


# Sections about GPU activity: a trace without any leaves them out (one sentence in the header).
GPU_SECTIONS = ("categories", "kernels", "timeline", "gaps", "idle", html_ranks.KEY)


def render_html(a) -> str:
    """The whole page as a string."""
    page = _Page()
    gpu = has_gpu(a)
    if gpu:
        page.add_section("categories", [page.figure(category_figure(a), "categories"),
                                        library_table_html(a)], "No kernel categories.")
        page.add_section("kernels", [page.figure(kernel_figure(a), "kernels")], "No kernels.")
        page.add_section("timeline", [page.figure(timeline_figure(a), "timeline")],
                         "No utilization timeline.", note=_timeline_note(a))
        page.add_section("gaps", [page.figure(gap_histogram_figure(a), "gaps")],
                         "No idle gaps: each device was busy from its first activity to its last.",
                         note=_gap_note(a))
        page.add_section("idle", [], "", raw=_idle_section(a))
    page.add_section(HOST_OPS_KEY, [], "", raw=host_ops_section(a))
    page.add_section("syncs", [page.figure(sync_sites_figure(a), "sync-sites"),
                               page.figure(sync_iterations_figure(a), "sync-iterations")],
                     sync_note(a) or "No sync points: the host never waited for the device.",
                     note=sync_note(a))
    page.add_section("phases", [page.figure(phase_figure(a), "phases")],
                     "No phases: the trace has no annotations (record_function) and no "
                     "ProfilerStep#N.", note=phase_note(a))
    if gpu:
        page.add_section(html_ranks.KEY, [], "", raw=html_ranks.ranks_section(a, page.figure))
    page.add_section("memory", [page.figure(memory_figure(a), "memory"), memory_table_html(a)], memory_empty(a))
    page.add_section("efficiency", [], "", raw=efficiency_section(a, page.figure))
    page.add_section("findings", [], "", raw=_findings_section(a))
    return page.render(_header(a))


def has_gpu(a) -> bool:
    """Whether the trace has GPU activity (kernels, memcpys, memsets) at all."""
    return a.gpu is not None and not a.gpu.empty


class _Page:
    """Collects figure divs (plotly.js inline with the first one only) and sections."""

    def __init__(self) -> None:
        self.sections: list[str] = []
        self.keys: list[str] = []
        self.figures = 0

    def figure(self, fig, name: str) -> str | None:
        if fig is None:
            return None
        import plotly.io as pio

        first = self.figures == 0
        self.figures += 1
        return pio.to_html(fig, full_html=False, include_plotlyjs=first, config=_CONFIG,
                           div_id=f"fig-{name}", default_height=f"{fig.layout.height or 450}px")

    def add_section(self, key: str, figures: list[str | None], empty: str, note: str = "",
                    raw: str | None = None) -> None:
        """A section from its figures (a sentence when none), or `raw`, a whole `<section>`
        another module built. Only the sections added appear in the navigation."""
        self.keys.append(key)
        if raw is not None:
            self.sections.append(raw)
            return
        shown = [f for f in figures if f is not None]
        body = "".join(f'<div class="figure">{f}</div>' for f in shown) if shown else \
            f'<p class="empty">{_esc(empty)}</p>'
        if shown and note:
            body = f'<p class="note">{note}</p>' + body
        self.sections.append(f'<section id="{key}"><h2>{_esc(SECTIONS[key])}</h2>{body}</section>')

    def render(self, header: str) -> str:
        nav = " · ".join(f'<a href="#{k}">{_esc(SECTIONS[k])}</a>' for k in self.keys)
        return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                f"<title>goodhart-prof report</title><style>{_CSS}</style></head>\n<body>"
                f"{header}<nav>{nav}</nav>\n" + "\n".join(self.sections) + "\n</body></html>\n")


# -- figures ----------------------------------------------------------------------------------
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


# -- page parts -------------------------------------------------------------------------------
def _header(a) -> str:
    from .. import __version__

    t = a.trace
    paths = "".join(f"<li><code>{_esc(p)}</code></li>" for p in t.paths)
    devices = ", ".join(f"rank {r} / gpu {d}" for r, d in t.devices) or "none (no GPU activity)"
    facts = [("trace", f"<ul class=\"paths\">{paths}</ul>"),
             ("ranks", f"{_esc(', '.join(str(r) for r in t.ranks))} "
                       f"<span class=\"muted\">(rank from {_esc(t.rank_source)})</span>"),
             ("GPU devices", _esc(devices)),
             ("events", f"{len(t.events):,}" + (f" ({t.skipped_events:,} malformed events skipped)"
                                              if t.skipped_events else ""))]
    rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts)
    warnings = "".join(f'<p class="warning">warning: {_esc(w)}</p>' for w in t.warnings)
    return (f"<header><h1>goodhart-prof report</h1><table class=\"facts\">{rows}</table>{warnings}"
            f"{_gpu_table(a)}{_legend(has_gpu(a))}<p class=\"muted\">goodhart-prof {_esc(__version__)}; times "
            f"in the tables are microseconds unless marked; definitions in docs/DESIGN.md.</p></header>")


def _gpu_table(a) -> str:
    if not has_gpu(a):
        left_out = "; ".join(SECTIONS[k] for k in GPU_SECTIONS)
        return (f'<p class="empty" id="no-gpu">This trace has no GPU activity (a CPU-only run?), so the '
                f'GPU sections ({_esc(left_out)}) are left out; the host sections follow.</p>')
    head = "".join(f"<th>{h}</th>" for h in ("rank / device", "span", "busy", "idle", "utilization",
                                             "kernel time"))
    body = "".join(
        f"<tr><td>rank {int(r.rank)} / gpu {int(r.device)}</td><td>{duration_sig(r.span_us)}</td>"
        f"<td>{duration_sig(r.busy_us)}</td><td>{duration_sig(r.idle_us)}</td><td>{percent(r.utilization)}</td>"
        f"<td>{duration_sig(getattr(r, 'kernel_us', float('nan')))}</td></tr>" for r in a.gpu.itertuples())
    return f'<table class="data"><caption>GPU time</caption><tr>{head}</tr>{body}</table>'


def _legend(gpu: bool = True) -> str:
    """The colour keys; a trace without GPU activity gets only the host ones."""
    def chips(colors: dict[str, str], meaning: dict[str, str] | None = None) -> str:
        return " ".join(f'<span class="chip"><i style="background:{c}"></i>{_esc(k)}'
                        + (f": {_esc(meaning[k])}" if meaning else "") + "</span>"
                        for k, c in colors.items())
    device = (f"<p><b>kernel categories</b> {chips(CATEGORY_COLORS)}</p>"
              f"<p><b>idle gap classes</b> {chips(GAP_COLORS, GAP_MEANING)}</p>") if gpu else ""
    words = ("<b>utilization</b>: busy share (union of kernels, memcpys, memsets) of each window "
             "of span/200; <b>phases</b>: CPU wall time of an annotation vs the GPU time of the work "
             "launched inside it." if gpu else "<b>phases</b>: CPU wall time of each annotation.")
    return ('<details open class="legend"><summary>Legend</summary>' + device
            + f"<p><b>sync point kinds</b> {chips(SYNC_COLORS)}</p>"
            f"<p>{words} Charts are interactive: hover for full names, drag to zoom, "
            "double-click to reset.</p></details>")


def _not_judged(a) -> str:
    if not a.not_judged:
        return ""
    rows = "".join(f"<li><code>{_esc(n.rule)}</code>: {_esc(n.reason)}</li>" for n in a.not_judged)
    return f'<p class="note">Not judged on this trace:</p><ul class="not-judged">{rows}</ul>'


def _idle_section(a) -> str:
    """Per device, the host code each share of idle time lies in (analysis/idle.py)."""
    title = _esc(SECTIONS["idle"])
    devices = [b for b in a.burstiness if b.idle_causes]
    if not devices:
        return (f'<section id="idle"><h2>{title}</h2>'
                '<p class="empty">No idle time to attribute.</p></section>')
    tables = []
    keep = capped([sum(c["idle_us"] for c in b.idle_causes) for b in devices])
    more = more_rows(len(devices), len(keep), "devices", "most idle time")
    for b in (devices[i] for i in keep):
        rows = "".join(
            f"<tr><td><code>{_esc(c['cause'])}</code></td><td>{duration_sig(c['idle_us'])}</td>"
            f"<td>{percent(c['share'])}</td><td>{_esc(c.get('frame') or '')}</td></tr>"
            for c in b.idle_causes)
        tables.append(f'<table class="data"><caption>rank {b.rank} / gpu {b.device}</caption>'
                      "<tr><th>host was in</th><th>idle</th><th>share of idle</th>"
                      f"<th>mostly in (Python)</th></tr>{rows}</table>")
    note = ("Each idle gap is read off the host thread that launched the work ending it and split "
            "by what that thread was doing: the innermost op or annotation open at each instant "
            "(ProfilerStep excluded; the innermost Python frame where neither is, when the trace has "
            "stacks). <i>(host idle / not traced)</i>: nothing recorded on that thread.")
    if more:
        tables.append(f'<p class="note">{_esc(more)}</p>')
    return f'<section id="idle"><h2>{title}</h2><p class="note">{note}</p>{"".join(tables)}</section>'


def _findings_section(a) -> str:
    title = _esc(SECTIONS["findings"])
    if not a.findings:
        return (f'<section id="findings"><h2>{title}</h2>'
                f'<p class="empty">None of the rules fired.</p>{_not_judged(a)}</section>')
    items = []
    for f in a.findings:
        color = SEVERITY_COLORS.get(str(f.severity), "#555")
        items.append(
            f'<li class="finding"><span class="severity" style="background:{color}">'
            f"{_esc(str(f.severity).upper())}</span> <code>{_esc(f.rule)}</code> "
            f"<b>{_esc(f.title)}</b>"
            f'<p class="saving">{_esc(saving_text(f))}</p>{_evidence(f.evidence)}'
            f'<p class="fix"><b>fix:</b> {_esc(f.fix)}</p></li>')
    return (f'<section id="findings"><h2>{title} ({len(a.findings)})</h2>'
            f'<p class="note">Largest estimated saving first; severity follows the saving\'s share '
            f'of the iteration (high from {SEVERITY_SHARES["high"].value:.0%}, medium from '
            f'{SEVERITY_SHARES["medium"].value:.0%}).</p><ol>{"".join(items)}</ol>'
            f'{_not_judged(a)}</section>')


def _evidence(evidence: dict[str, Any]) -> str:
    evidence = evidence or {}
    parts = [f"<li><b>{_esc(k)}</b>: {_esc(_value(v))}</li>" for k, v in evidence.items() if k != "sites"]
    for site in evidence.get("sites") or []:
        if isinstance(site, dict):
            extra = f", {duration_sig(site['total_us'])}" if "total_us" in site else ""
            parts.append(f"<li>at <code>{_esc(site.get('site', ''))}</code> "
                         f"({_esc(site.get('count', '?'))}x{_esc(extra)})</li>")
        else:
            parts.append(f"<li>at <code>{_esc(site)}</code></li>")
    return f'<ul class="evidence">{"".join(parts)}</ul>' if parts else ""


def _timeline_note(a) -> str:
    if not a.burstiness:
        return ""
    b = a.burstiness[0]
    return (f"Busy share per window of {_esc(duration_sig(b.window_us))} (span/200 on the first device). "
            f"Shaded, with a marker above: the {MARKED_GAPS} largest idle gaps per device, coloured "
            "by class. util CV and B (burstiness of kernel starts: -1 periodic, 0 random, towards "
            "1 bursty) are in each device's title.")


def _gap_note(a) -> str:
    n = len(a.burstiness)
    return (f"The idle gaps of {'all ' + str(n) + ' devices' if n > 1 else 'the device'} together, in "
            "duration bins of 1-2-5 per decade: how many fall in each bin (top) and how much idle "
            "time they add up to (bottom), stacked by class.")


# -- small helpers ----------------------------------------------------------------------------
def _subplots():
    from plotly.subplots import make_subplots
    return make_subplots


def _device_title(a, b) -> str:
    util = a.gpu[(a.gpu["rank"] == b.rank) & (a.gpu["device"] == b.device)]["utilization"] \
        if a.gpu is not None and not a.gpu.empty else pd.Series(dtype=float)
    parts = [f"rank {b.rank} / gpu {b.device}"]
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


def _value(v: Any) -> str:
    """An evidence value, compact: floats to 4 significant digits, dicts and lists inline."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, (bool, np.bool_)) or v is None:
        return str(v)
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if not math.isfinite(v):
            return "-"
        return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"
    return str(v)


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1320px;
padding:16px 24px;color:#222}
h1{font-size:22px;margin:0 0 8px}h2{font-size:18px;margin:28px 0 6px;border-bottom:1px solid #ddd;
padding-bottom:4px}
table.facts th{text-align:left;padding-right:14px;vertical-align:top;font-weight:600}
table.facts td,table.facts th{padding:1px 14px 1px 0}
ul.paths{margin:0;padding-left:0;list-style:none}
table.data{border-collapse:collapse;margin:10px 0}table.data caption{text-align:left;font-weight:600}
table.data th,table.data td{border-bottom:1px solid #e4e4e4;padding:3px 10px;text-align:right}
table.data td:first-child,table.data th:first-child{text-align:left}
.muted{color:#777}.warning{color:#b26a00}.empty{color:#555;font-style:italic}
.note{color:#555;margin:4px 0}
nav{margin:14px 0;padding:6px 0;border-top:1px solid #eee;border-bottom:1px solid #eee}
.legend p{margin:4px 0}.chip{display:inline-block;margin-right:12px;white-space:nowrap}
.chip i{display:inline-block;width:11px;height:11px;margin-right:4px;border-radius:2px;
vertical-align:-1px}
.figure{margin:6px 0 14px}
li.finding{margin-bottom:12px}
p.saving{margin:2px 0;font-weight:600}
.severity{color:#fff;border-radius:3px;padding:1px 6px;font-size:12px;font-weight:700}
ul.evidence{margin:4px 0;color:#333;font-size:13px}p.fix{margin:2px 0 0}
code{font-size:12.5px;background:#f4f4f4;padding:0 3px;border-radius:2px;word-break:break-all}
"""
