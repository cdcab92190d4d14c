"""The HTML report's host-side sections (html.py registers them): the hottest host ops, sync
points by site and per iteration, and phases (on several ranks: the median rank's CPU time
beside the slowest rank's, never their sum)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...analysis.gpu.compiled import display_name
from ...analysis.host.syncs import CPU_NO_READS_NOTE, CPU_READS_NOTE
from ..common import short, short_tail
from .common import LAYOUT as _LAYOUT
from .common import data_table
from ...units import duration_sig
from .common import esc as _esc
from .common import go as _go
from .common import label as _label
from .common import wrap as _wrap
from ..text.setup import iteration_label

TOP_SITES = 20
TOP_PHASES = 15
TOP_HOST_OPS = 20
HOST_OPS_KEY = "hostops"
HOST_OPS_TITLE = "Hottest host ops"

SYNC_COLORS = {
    "item": "#d62728", "nonzero": "#ff7f0e", "is_nonzero": "#bcbd22", "memcpy_dtoh": "#1f77b4",
    "memcpy_htod_pageable": "#17becf", "stream_sync": "#9467bd", "device_sync": "#8c564b",
    "event_sync": "#e377c2", "sync_memcpy": "#2ca02c",
}
PHASE_COLORS = {"cpu": "#546e7a", "max": "#b0bec5", "gpu": "#43a047"}


def host_ops_section(a, top: int = TOP_HOST_OPS) -> str:
    """The `<section>` of the hottest host ops by self time (analysis/host/hottest_ops.py)."""
    ops = getattr(a, "host_ops", None)
    head = f'<section id="{HOST_OPS_KEY}"><h2>{_esc(HOST_OPS_TITLE)}</h2>'
    if ops is None or ops.empty:
        return head + '<p class="empty">No cpu ops in this trace.</p></section>'
    host = float(ops["self_us"].sum())
    note = (f"The {min(top, len(ops))} of {len(ops):,} host ops with the most self time (the op's "
            "duration less the ops it called), all threads and ranks; total is inclusive. Shares "
            f"are of the host time, {_esc(duration_sig(host))}: the sum of all self times.")
    rows = [(f"<code>{_esc(short(r.name, 90))}</code>", f"{int(r.calls):,}", duration_sig(r.self_us),
             f"{r.self_pct:.1f}%", duration_sig(r.total_us), f"{r.total_pct:.1f}%")
            for r in ops.head(top).itertuples()]
    table = data_table("host ops by self time", ("op", "calls", "self", "self share", "total",
                                                  "total share"), rows)
    return head + f'<p class="note">{note}</p>{table}</section>'


def sync_sites_figure(a, top: int = TOP_SITES):
    """Sync points per (kind, site), most frequent first, coloured by kind."""
    if a.syncs is None or not a.syncs.total or a.syncs.sites.empty:
        return None
    sites = a.syncs.sites
    go = _go()
    sites = sites.head(top).reset_index(drop=True)
    background = sites["background"].to_numpy(bool) if "background" in sites else [False] * len(sites)
    # a site on a thread that launches no GPU work (analysis/host/syncs.py) holds up no launch
    labels = [_label(f"{i + 1}. {short_tail(s, 70)}{' (background thread)' if bg else ''}")
              for i, (s, bg) in enumerate(zip(sites["site"].astype(str), background))]
    fig = go.Figure()
    for kind in kinds(sites["kind"]):
        sel = (sites["kind"].astype(str) == kind).to_numpy()
        rows = sites[sel]
        fig.add_trace(go.Bar(
            x=rows["count"], y=[l for l, s in zip(labels, sel) if s], orientation="h", name=kind,
            marker_color=SYNC_COLORS.get(kind, "#7f7f7f"),
            hovertext=[_wrap(s) for s in rows["site"].astype(str)],
            customdata=rows["total_us"].to_numpy(float) / 1e3,
            hovertemplate="%{hovertext}<br>%{x:,} sync points, host time %{customdata:,.3f} ms"
                          f"<extra>{_label(kind)}</extra>"))
    fig.update_layout(**_LAYOUT, height=140 + 26 * len(sites), barmode="stack",
                      xaxis_title="sync points", legend=dict(title_text="kind", traceorder="normal"),
                      title=dict(text="per site", x=0, font=dict(size=13)),
                      yaxis=dict(categoryorder="array", categoryarray=labels[::-1], automargin=True))
    return fig


def sync_iterations_figure(a):
    """Sync points per traced iteration (`outside` = not inside any iteration), by kind."""
    if a.syncs is None or not a.syncs.total or a.syncs.per_iteration.empty:
        return None
    per_it = a.syncs.per_iteration
    go = _go()
    order = sorted(int(i) for i in per_it["iteration"].unique())
    order = [i for i in order if i >= 0] + [i for i in order if i < 0]
    names = {i: (f"#{i}" if i >= 0 else "outside") for i in order}
    fig = go.Figure()
    for kind in kinds(per_it["kind"]):
        rows = per_it[(per_it["kind"].astype(str) == kind).to_numpy()]
        fig.add_trace(go.Bar(x=[names[int(i)] for i in rows["iteration"]], y=rows["count"], name=kind,
                             marker_color=SYNC_COLORS.get(kind, "#7f7f7f"),
                             hovertemplate=f"{_label(kind)}, iteration " + "%{x}: %{y:,}<extra></extra>"))
    fig.update_layout(**_LAYOUT, height=340, barmode="stack", bargap=0.5 if len(order) < 4 else 0.2,
                      legend=dict(title_text="kind", traceorder="normal"),
                      title=dict(text="per iteration", x=0, font=dict(size=13)),
                      xaxis=dict(title=f"iteration ({iteration_label(a.trace)})", type="category",
                                 categoryorder="array", categoryarray=[names[i] for i in order]),
                      yaxis_title="sync points")
    return fig


def phase_figure(a, top: int = TOP_PHASES):
    """Per phase: CPU time next to the GPU time launched inside it (iterations, then annotations)."""
    ph = a.phases
    if ph is None or ph.empty:
        return None
    go = _go()
    iterations = ph[ph["kind"] == "iteration"]
    annotations = ph[ph["kind"] == "annotation"].sort_values("cpu_us", ascending=False,
                                                             kind="stable").head(top)
    rows = pd.concat([iterations, annotations], ignore_index=True)
    labels = [_label(short(display_name(n), 60)) for n in rows["name"].astype(str)]
    labels = unique(labels)
    multi = "ranks" in rows and bool((rows["ranks"] > 1).any())
    who = (rows["median_rank"], rows["max_rank"]) if multi else (rows["count"] * 0,) * 2
    custom = np.c_[rows["count"].to_numpy(), rows["gpu_kernels"].to_numpy(), rows["syncs"].to_numpy(),
                   who[0].to_numpy(), who[1].to_numpy()]
    fig = go.Figure()
    series = [("cpu_us", "CPU time", "CPU time", PHASE_COLORS["cpu"])]
    if multi:  # ranks run side by side: the slowest rank beside the median one, never a sum
        series = [("cpu_us", "CPU time (median rank)", "CPU time of rank %{customdata[3]} (median)",
                   PHASE_COLORS["cpu"]),
                  ("cpu_max_us", "CPU time (slowest rank)", "CPU time of rank %{customdata[4]} (slowest)",
                   PHASE_COLORS["max"])]
    if (rows["gpu_us"] > 0).any():  # a CPU-only trace launches nothing: no empty second bar
        series.append(("gpu_us", "GPU time launched", "GPU time launched", PHASE_COLORS["gpu"]))
    for col, name, hover, color in series:
        fig.add_trace(go.Bar(
            x=rows[col] / 1e3, y=labels, orientation="h", name=name, marker_color=color,
            customdata=custom,
            hovertemplate="%{y}: " + hover + " %{x:,.3f} ms<br>%{customdata[0]:,} instances, "
                          "%{customdata[1]:,} GPU kernels, %{customdata[2]:,} sync points<extra></extra>"))
    fig.update_layout(**_LAYOUT, height=150 + 20 * len(series) * len(rows), barmode="group",
                      xaxis_title="ms", showlegend=True,
                      yaxis=dict(categoryorder="array", categoryarray=labels[::-1], automargin=True),
                      legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0, xanchor="left"))
    return fig


def sync_note(a) -> str:
    s, reads = a.syncs, a.reads
    if reads is not None and reads.total and (s is None or not s.total):
        kinds = ", ".join(f"{_esc(k)} {v:,}" for k, v in reads.by_kind.items() if v)
        return (f"No sync points: this is a CPU-only trace. {reads.total:,} host reads ({kinds}). "
                + _esc(CPU_READS_NOTE))
    if s is None or not s.total:
        from ...analysis.gpu.device_time import unrecorded_gpu
        if s is not None and a.gpu.empty and unrecorded_gpu(a.trace) is None:
            return "No sync points: " + _esc(CPU_NO_READS_NOTE)
        return ""
    kinds = ", ".join(f"{_esc(k)} {v:,}" for k, v in s.by_kind.items() if v)
    return f"{s.total:,} sync points ({kinds}); the top {TOP_SITES} sites by count."


def phase_note(a) -> str:
    ph = a.phases
    gpu = ph is not None and not ph.empty and bool((ph["gpu_us"] > 0).any())
    multi = ph is not None and "ranks" in ph and bool((ph["ranks"] > 1).any())
    ranks = (" Several ranks: each bar is one rank's figure (the median rank's), never a sum over "
             "ranks, with the slowest rank's CPU time beside it (hover: which rank)." if multi else "")
    return (f"Traced iterations ({iteration_label(a.trace)}, whole rank) first, then the {TOP_PHASES} "
            "annotations with the most CPU time (their own thread). "
            + ("GPU time counts kernels, memcpys and memsets launched inside." if gpu else
               "No phase launched GPU work, so only CPU time is shown.") + ranks)


def kinds(column: pd.Series) -> list[str]:
    """The sync kinds present, in the legend's (DESIGN.md's) order, unknown ones last."""
    present = list(dict.fromkeys(column.astype(str)))
    return [k for k in SYNC_COLORS if k in present] + [k for k in present if k not in SYNC_COLORS]


def unique(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        n = seen.get(label, 0)
        seen[label] = n + 1
        out.append(label if n == 0 else f"{label} ({n + 1})")
    return out


