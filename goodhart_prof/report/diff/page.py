"""`goodhart-prof diff --html FILE`: one self-contained page (plotly.js inlined) of a `Comparison`.

Grouped A-vs-B bars for kernel categories, top kernels, sync points by kind, annotation phases and
collectives (times in ms), after the recording warning, the summary, the better/worse headline,
the within-noise line, the per-iteration medians with their intervals, the exact counts and the
host ops as tables. Every figure is written as the analyze page writes it (three significant
digits in its unit: `units.duration`, `interval_text`, `bytes_text`), every row has a
readable name and its verdict. The page is written to a temporary file and renamed; an existing
file is kept unless `force`.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...analysis.compare.summary import shown_rows
from ...fileio import writing
from ..common import refuse_overwrite
from ...tables import short_middle
from ...units import bytes_text
from .format import KIND_NAMES, item_names, count, interval, kernel_labels, ratio_text, signed_text, summary_text, \
    value_text
from ..html.common import data_table, esc

COLORS = {"A": "#7f7f7f", "B": "#1f77b4"}
LABEL_WIDTH = 60
MS = 1e3  # the charts' times are in ms (the analyze page's unit)


def _label(name: str, width: int = LABEL_WIDTH) -> str:
    return short_middle(name, width)


def _bars(title: str, labels: list[str], a: list[float], b: list[float], unit: str,
          names: list[str] | None = None, horizontal: bool = False):
    import plotly.graph_objects as go

    fig = go.Figure()
    hover = names if names is not None else labels
    axis = "x" if horizontal else "y"
    for side, values in (("A", a), ("B", b)):
        xy = dict(y=labels, x=values, orientation="h") if horizontal else dict(x=labels, y=values)
        template = f"%{{customdata}}<br>{side}: %{{{axis}:,.3~g}} {unit}<extra></extra>"
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
                          _ms(cats["total_us_a"]), _ms(cats["total_us_b"]), "ms"))
    k = c.kernels.head(top)
    if not k.empty:
        names = k["name"].astype(str).tolist()
        labels = [f"{i + 1}. {_label(n)}" for i, n in enumerate(kernel_labels(names))]
        figs.append(_bars(f"Top {len(k)} kernels by GPU time", labels, _ms(k["total_us_a"]),
                          _ms(k["total_us_b"]), "ms", names, horizontal=True))
    kinds = c.sync_kinds[(c.sync_kinds["count_a"] > 0) | (c.sync_kinds["count_b"] > 0)]
    if not kinds.empty:
        figs.append(_bars("Sync points by kind", kinds["kind"].tolist(), kinds["count_a"].tolist(),
                          kinds["count_b"].tolist(), "sync points"))
    ph = c.phases.head(top)
    if not ph.empty:
        names = ph["name"].astype(str).tolist()
        figs.append(_bars("Phases: CPU time per annotation", [_label(n, 40) for n in names],
                          _ms(ph["cpu_us_a"]), _ms(ph["cpu_us_b"]), "ms", names, horizontal=True))
    comm = c.communication
    if not comm.empty:
        figs.append(_bars("Communication: kernel time per collective (all ranks)", comm["kind"].tolist(),
                          _ms(comm["total_us_a"]), _ms(comm["total_us_b"]), "ms"))
    return figs


def _ms(us: pd.Series) -> list[float]:
    return (us.astype(float) / MS).tolist()


def _rows_table(caption: str, headers: list[str], rows: list[tuple]) -> str:
    return data_table(caption, headers, [[esc(c) for c in row] for row in rows])


def _summary(c) -> str:
    rows = [(r.name, summary_text(r.unit, r.a, sig=True), summary_text(r.unit, r.b, sig=True),
             summary_text(r.unit, r.delta, signed=True, sig=True), ratio_text(r.ratio, r.a), r.verdict,
             r.why if r.verdict == "not judged" else "") for r in shown_rows(c.summary).itertuples()]
    return _rows_table("Summary (change = B - A, ratio = B / A)",
                       ["figure", "A", "B", "change", "ratio", "verdict", "why"], rows)


def _headline(caption: str, frame: pd.DataFrame) -> str:
    if frame.empty:
        return f"<p><b>{esc(caption)}</b>: nothing</p>"
    rows = [(name, KIND_NAMES.get(r.kind, r.kind), value_text(r.metric, r.a, True),
             interval(r.metric, r.low_a, r.high_a), value_text(r.metric, r.b, True),
             interval(r.metric, r.low_b, r.high_b), signed_text(r.metric, r.delta, True), ratio_text(r.ratio, r.a),
             value_text("time_us", r.impact_us, True)) for name, r in zip(item_names(frame), frame.itertuples())]
    return _rows_table(caption, ["item", "kind", "A", "A interval", "B", "B interval", "change", "ratio",
                                 "impact"], rows)


def _spread(c) -> str:
    s = c.spread
    rows = [(name, KIND_NAMES.get(r.kind, r.kind), f"{r.n_a}", value_text(r.metric, r.a, True),
             interval(r.metric, r.low_a, r.high_a), f"{r.n_b}", value_text(r.metric, r.b, True),
             interval(r.metric, r.low_b, r.high_b), signed_text(r.metric, r.delta, True), r.verdict)
            for name, r in zip(item_names(s), s.itertuples())]
    return _rows_table("Per iteration: median and interval over the counted iterations",
                       ["figure", "kind", "n A", "A", "A interval", "n B", "B", "B interval", "change", "verdict"],
                       rows)


def _counts(c) -> str:
    k = c.counts
    if k is None or k.empty:
        return ""
    metric = "count_per_iteration" if bool(k["per_iteration"].iloc[0]) else "count"
    rows = [(str(r.item), KIND_NAMES.get(r.kind, r.kind), r.site if isinstance(r.site, str) else "",
             value_text(metric, r.a), value_text(metric, r.b), signed_text(metric, r.delta),
             r.verdict if isinstance(r.verdict, str) else "same") for r in k.itertuples()]
    return _rows_table("Counts (exact; per iteration when both sides have counted iterations)",
                       ["kind", "what", "site (changed most)", "A", "B", "change", "verdict"], rows)


def _host_ops(c, top: int) -> str:
    h = c.host_ops
    if h is None or h.empty:
        return ""
    changed = h["verdict"].isin(["better", "worse"])
    shown = pd.concat([h[changed], h[~changed]]).head(top)
    rows = [(str(r.name), f"{r.calls_a:,}", f"{r.calls_b:,}", value_text("time_us", r.median_a, True),
             interval("time_us", r.low_a, r.high_a), value_text("time_us", r.median_b, True),
             interval("time_us", r.low_b, r.high_b), r.verdict) for r in shown.itertuples()]
    return _rows_table(f"Host ops: self time per iteration (median), {len(shown)} of {len(h)}, changes first",
                       ["op", "calls A", "calls B", "A", "A interval", "B", "B interval", "verdict"], rows)


def _memory_table(c) -> str:
    """Memory per device, A vs B (compare.py `memory`); nothing when neither has any."""
    m = c.memory
    if m is None or m.empty:
        return ""
    rows = [(r.label, bytes_text(r.peak_allocated_a), bytes_text(r.peak_allocated_b),
             bytes_text(r.peak_reserved_a), bytes_text(r.peak_reserved_b),
             count(r.allocations_per_iteration_a), count(r.allocations_per_iteration_b),
             bytes_text(r.growth_per_iteration_a, signed=True), bytes_text(r.growth_per_iteration_b, signed=True))
            for r in m.itertuples()]
    return _rows_table("Memory (whole traces, not judged)", [
        "device", "peak allocated A", "peak allocated B", "peak reserved A", "peak reserved B",
        "allocations/iteration A", "allocations/iteration B", "growth/iteration A", "growth/iteration B"], rows)


def page(c, top: int = 15) -> str:
    figs = figures(c, top)
    plots = "".join(f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs))
    sides = "".join(f"<p><b>{s}</b>: {esc(', '.join(str(p) for p in a.trace.paths))}</p>"
                    for s, a in (("A", c.a), ("B", c.b)))
    warning = f'<p class="warning"><b>Warning</b>: {esc(c.recording_warning)}</p>' if c.recording_warning else ""
    noise = c.within_noise
    noise_line = (f"<p><b>within noise</b> (intervals overlap): "
                  f"{esc(', '.join(str(i) for i in noise['item']))}</p>" if len(noise) else "")
    statement = f"<p><b>Machine speed</b>: {esc(c.speed_check)}</p>" + (
        f"<p><b>Time</b>: {esc(c.time_statement)}</p>" if c.time_statement else "")
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>goodhart-prof diff</title>
<style>body{{font-family:sans-serif;margin:24px}}
table{{border-collapse:collapse;font-size:13px;margin-bottom:16px}}
caption{{text-align:left;font-weight:bold;padding:6px 0}}
td,th{{border:1px solid #ddd;padding:3px 8px;text-align:right;white-space:nowrap}}
td:first-child,td:nth-child(2){{text-align:left;white-space:normal}}
.warning{{background:#fff3cd;padding:6px 10px}}</style>
</head><body>
<h1>goodhart-prof diff</h1>{warning}{sides}
<p>{esc(c.iterations_line)}</p>{statement}
{_summary(c)}
{_headline("What got better", c.better.head(top))}
{_headline("What got worse", c.worse.head(top))}
{noise_line}
{_spread(c)}
{_counts(c)}
{_host_ops(c, top)}
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
