"""`goodhart-prof diff --html FILE`: one self-contained page (plotly.js inlined) of a `Comparison`.

Grouped A-vs-B bars for kernel categories, top kernels, sync points by kind, annotation phases and
collectives,
after the summary, the better/worse headline, the within-noise line, the per-iteration medians
with their intervals and the exact counts as tables. The page is written to a temporary file
and renamed; an existing file is kept unless `force`.
"""
from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from ..fileio import writing
from .common import refuse_overwrite

COLORS = {"A": "#7f7f7f", "B": "#1f77b4"}
LABEL_WIDTH = 60


def _label(name: str, width: int = LABEL_WIDTH) -> str:
    name = str(name)
    return name if len(name) <= width else name[: width - 1] + "…"


def _bars(title: str, labels: list[str], a: list[float], b: list[float], unit: str,
          names: list[str] | None = None, horizontal: bool = False):
    import plotly.graph_objects as go

    fig = go.Figure()
    hover = names if names is not None else labels
    axis = "x" if horizontal else "y"
    for side, values in (("A", a), ("B", b)):
        xy = dict(y=labels, x=values, orientation="h") if horizontal else dict(x=labels, y=values)
        template = f"%{{customdata}}<br>{side}: %{{{axis}:,.1f}} {unit}<extra></extra>"
        fig.add_trace(go.Bar(name=side, marker_color=COLORS[side], customdata=hover,
                             hovertemplate=template, **xy))
    fig.update_layout(title=title, barmode="group", template="plotly_white",
                      height=max(380, 26 * len(labels) + 140) if horizontal else 420,
                      margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="h", y=1.08))
    if horizontal:
        fig.update_yaxes(autorange="reversed")
        fig.update_xaxes(title=unit)
    else:
        fig.update_yaxes(title=unit)
    return fig


def figures(c, top: int = 15) -> list:
    """The page's plotly figures (also usable from a notebook)."""
    figs = []
    cats = c.categories
    if not cats.empty:
        figs.append(_bars("GPU time by kernel category", cats["category"].tolist(),
                          cats["total_us_a"].tolist(), cats["total_us_b"].tolist(), "us"))
    k = c.kernels.head(top)
    if not k.empty:
        names = k["name"].astype(str).tolist()
        labels = [f"{i + 1}. {_label(n)}" for i, n in enumerate(names)]
        figs.append(_bars(f"Top {len(k)} kernels by GPU time", labels, k["total_us_a"].tolist(),
                          k["total_us_b"].tolist(), "us", names, horizontal=True))
    kinds = c.sync_kinds[(c.sync_kinds["count_a"] > 0) | (c.sync_kinds["count_b"] > 0)]
    if not kinds.empty:
        figs.append(_bars("Sync points by kind", kinds["kind"].tolist(), kinds["count_a"].tolist(),
                          kinds["count_b"].tolist(), "sync points"))
    ph = c.phases.head(top)
    if not ph.empty:
        names = ph["name"].astype(str).tolist()
        figs.append(_bars("Phases: CPU time per annotation", [_label(n, 40) for n in names],
                          ph["cpu_us_a"].tolist(), ph["cpu_us_b"].tolist(), "us", names, horizontal=True))
    comm = c.communication
    if not comm.empty:
        figs.append(_bars("Communication: kernel time per collective (all ranks)", comm["kind"].tolist(),
                          comm["total_us_a"].tolist(), comm["total_us_b"].tolist(), "us"))
    return figs


def _table(frame: pd.DataFrame, columns: list[str]) -> str:
    def cell(v) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            return "" if v != v else f"{v:,.3f}"
        return html.escape(str(v))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    rows = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>"
                   for row in frame[columns].itertuples(index=False, name=None))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _memory_table(c) -> str:
    """Memory per device, A vs B (bytes; compare.py `memory`); nothing when neither has any."""
    if c.memory is None or c.memory.empty:
        return ""
    cols = ["label"] + [f"{q}_{s}" for q in ("peak_allocated", "peak_reserved",
                                              "allocations_per_iteration", "growth_per_iteration")
                        for s in ("a", "b")]
    return f"<h2>Memory (bytes; allocations per iteration)</h2>{_table(c.memory, cols)}"


def page(c, top: int = 15) -> str:
    figs = figures(c, top)
    plots = "".join(f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs))
    sides = "".join(f"<p><b>{s}</b>: {html.escape(', '.join(str(p) for p in a.trace.paths))}</p>"
                    for s, a in (("A", c.a), ("B", c.b)))
    cols = ["kind", "item", "metric", "a", "b", "delta", "ratio", "impact_us", "low_a", "high_a",
            "low_b", "high_b", "site"]
    spread_cols = ["kind", "item", "n_a", "a", "low_a", "high_a", "n_b", "b", "low_b", "high_b", "delta",
                   "verdict"]
    noise = c.within_noise
    noise_line = (f"<p><b>within noise</b> (intervals overlap): "
                  f"{html.escape(', '.join(str(i) for i in noise['item']))}</p>" if len(noise) else "")
    statement = f"<p><b>Machine speed</b>: {html.escape(c.speed_check)}</p>" + (
        f"<p><b>Time</b>: {html.escape(c.time_statement)}</p>" if c.time_statement else "")
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>goodhart-prof diff</title>
<style>body{{font-family:sans-serif;margin:24px}}
table{{border-collapse:collapse;font-size:13px;margin-bottom:16px}}
td,th{{border:1px solid #ddd;padding:3px 8px;text-align:right}}
td:first-child,td:nth-child(2){{text-align:left}}</style>
</head><body>
<h1>goodhart-prof diff</h1>{sides}
<p>{html.escape(c.iterations_line)}</p>{statement}
<h2>Summary (delta = B - A, ratio = B / A)</h2>{_table(c.summary, ["metric", "a", "b", "delta", "ratio"])}
<h2>What got better</h2>{_table(c.better.head(top), cols) if len(c.better) else "<p>nothing</p>"}
<h2>What got worse</h2>{_table(c.worse.head(top), cols) if len(c.worse) else "<p>nothing</p>"}
{noise_line}
<h2>Per iteration: median and interval (time in us, env-steps/s)</h2>{_table(c.spread, spread_cols)}
<h2>Counts (exact; per iteration when both sides have counted iterations)</h2>{_table(c.counts, ["kind", "item", "site", "a", "b", "delta", "verdict"])}
{_memory_table(c)}
{plots}
</body></html>
"""


def write_html(c, path: str | Path, force: bool = False, top: int = 15) -> Path:
    """Write the page; refuses to replace an existing file unless force. Returns the path."""
    path = refuse_overwrite(path, force)
    text = page(c, top)
    with writing(path, ".html", exclusive=not force) as tmp:  # see fileio.publish_new
        tmp.write_text(text, encoding="utf-8")
    return path
