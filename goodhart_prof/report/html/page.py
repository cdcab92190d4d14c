"""The HTML report: one self-contained file of plotly charts (`goodhart-prof analyze --html FILE`).

Each chart is built by a small function (here, or in the section modules html_gpu, html_host,
html_ranks, html_memory, html_efficiency; html_critical's section is tables only) that reads the
`Analysis` tables and returns a plotly Figure (None when its table is empty; the page then says
why in a sentence). No figure computes an analysis of its own: ranking, totals and classes come
from `goodhart_prof.analysis`; here we only pick the top rows, convert units and bin the gap
durations for display.

plotly.js is embedded inline once, with the first figure, so the file opens offline. Every text
that comes from the trace (kernel names, sites, phase names, finding evidence) is escaped: with
`html.escape` in the page, and as HTML entities inside plotly labels (plotly.js renders a few
tags such as `<b>` in labels and decodes entities, so `&lt;` shows as `<`).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ...analysis.rules.savings import SEVERITY_SHARES, overlap
from ..common import capped, more_rows, percent, refuse_overwrite, saving_text
from ...analysis.gpu.idle import cause_label
from ...analysis.iterations import find_iterations
from ..text.setup import STEP_BOUNDS_NOTE, setup_line, sites_line
from ...units import device_text, duration_sig
from .common import esc as _esc
from . import compile_section as html_compile
from . import cupti_section as html_cupti
from . import critical_path as html_critical
from . import kernel_sequences as html_sequences
from . import ranks as html_ranks
from .gpu import (CATEGORY_COLORS, GAP_COLORS, MARKED_GAPS, TOP_KERNELS, category_figure,
                       gap_histogram_figure, gap_note, kernel_figure, library_table_html, timeline_figure)
from .host import (HOST_OPS_KEY, HOST_OPS_TITLE, SYNC_COLORS, TOP_SITES, host_ops_section,
                        phase_figure, phase_note, sync_iterations_figure, sync_note, sync_sites_figure)

# The figure functions and sizes the page is made of, wherever they live (tests call them here).
__all__ = ["write_html", "render_html", "category_figure", "kernel_figure", "timeline_figure",
           "gap_histogram_figure", "sync_sites_figure", "sync_iterations_figure", "phase_figure",
           "TOP_KERNELS", "TOP_SITES", "MARKED_GAPS", "SECTIONS"]
from .memory import MEMORY_TITLE, memory_empty, memory_figure, memory_table_html
from .efficiency import TITLE as EFFICIENCY_TITLE, efficiency_section


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
    html_sequences.KEY: html_sequences.TITLE,
    html_critical.KEY: html_critical.TITLE,
    html_compile.KEY: html_compile.TITLE,
    html_cupti.KEY: html_cupti.TITLE,
    "memory": MEMORY_TITLE,
    "efficiency": EFFICIENCY_TITLE,
    "findings": "Findings",
}

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
    from ...fileio import writing

    path = refuse_overwrite(path, force)
    page = render_html(analysis)
    with writing(path, exclusive=not force) as tmp:  # never replaces a file made since the check
        tmp.write_text(page, encoding="utf-8")
    return path


# Sections about GPU activity: a trace without any leaves them out (one sentence in the header).
GPU_SECTIONS = ("categories", "kernels", "timeline", "gaps", "idle", html_ranks.KEY, html_sequences.KEY,
                html_critical.KEY)
# Sections only a trace of that kind has (torch.compile'd code, CUPTI counters): absent otherwise.
OPTIONAL_SECTIONS = (html_compile.KEY, html_cupti.KEY)


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
                         note=gap_note(a))
        page.add_section("idle", [], "", raw=_idle_section(a))
    page.add_section(HOST_OPS_KEY, [], "", raw=host_ops_section(a))
    page.add_section("syncs", [page.figure(sync_sites_figure(a), "sync-sites"),
                               page.figure(sync_iterations_figure(a), "sync-iterations")],
                     sync_note(a) or "No sync points: the host never waited for the device.",
                     note=sync_note(a))
    page.add_section("phases", [page.figure(phase_figure(a), "phases")],
                     "No phases: the trace has no annotations (record_function) and no "
                     "iterations (no ProfilerStep#N, and none inferred).", note=phase_note(a))
    if gpu:
        page.add_section(html_ranks.KEY, [], "", raw=html_ranks.ranks_section(a, page.figure))
        page.add_section(html_sequences.KEY, [], "", raw=html_sequences.kernel_sequences_section(a))
        page.add_section(html_critical.KEY, [], "", raw=html_critical.critical_path_section(a))
    if a.compile is not None:
        page.add_section(html_compile.KEY, [], "", raw=html_compile.compile_section(a))
    if a.cupti is not None:
        page.add_section(html_cupti.KEY, [], "", raw=html_cupti.cupti_section(a))
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


# -- page parts -------------------------------------------------------------------------------
def _header(a) -> str:
    from ... import __version__

    t = a.trace
    paths = "".join(f"<li><code>{_esc(p)}</code></li>" for p in t.paths)
    devices = ", ".join(device_text(r, d) for r, d in t.devices) or "none (no GPU activity)"
    facts = [("trace", f"<ul class=\"paths\">{paths}</ul>"),
             ("ranks", f"{_esc(', '.join(str(r) for r in t.ranks))} "
                       f"<span class=\"muted\">(rank from {_esc(t.rank_source)})</span>"),
             ("GPU devices", _esc(devices)),
             ("events", f"{len(t.events):,}" + (f" ({t.skipped_events:,} malformed events skipped)"
                                              if t.skipped_events else "")),
             ("iterations", _esc(find_iterations(t).describe()))]
    borrowed = sites_line(t)
    if borrowed:
        facts.append(("sites", _esc(borrowed.removeprefix("Sites: "))))
    once = setup_line(t)
    if once:
        facts.append(("setup", _esc(once.removeprefix("Setup "))))
    rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts)
    warnings = "".join(f'<p class="warning">warning: {_esc(w)}</p>' for w in t.warnings)
    return (f"<header><h1>goodhart-prof report</h1><table class=\"facts\">{rows}</table>{warnings}"
            f"{_gpu_table(a)}{_legend(has_gpu(a))}<p class=\"muted\">goodhart-prof {_esc(__version__)}; times "
            f"in the tables are microseconds unless marked; definitions in docs/DESIGN.md.</p></header>")


def _gpu_table(a) -> str:
    if not has_gpu(a):
        left_out = "; ".join(SECTIONS[k] for k in GPU_SECTIONS)
        from ...analysis.gpu.device_time import unrecorded_gpu
        missing = unrecorded_gpu(a.trace)
        what = (f"{_esc(missing.text())}. So the" if missing
                else "This trace has no GPU activity (a CPU-only run?), so the")
        return (f'<p class="empty" id="no-gpu">{what} '
                f'GPU sections ({_esc(left_out)}) are left out; the host sections follow.</p>')
    steps = "step_utilization" in a.gpu and bool(a.gpu["step_utilization"].notna().any())
    head = "".join(f"<th>{h}</th>" for h in ("rank / device", "span", "busy", "idle", "utilization",
                                             "kernel time") + (("idle in steps", "util. in steps") if steps else ()))
    body = "".join(
        f"<tr><td>{device_text(int(r.rank), int(r.device))}</td><td>{duration_sig(r.span_us)}</td>"
        f"<td>{duration_sig(r.busy_us)}</td><td>{duration_sig(r.idle_us)}</td><td>{percent(r.utilization)}</td>"
        f"<td>{duration_sig(getattr(r, 'kernel_us', float('nan')))}</td>"
        + (f"<td>{duration_sig(r.step_idle_us)}</td><td>{percent(r.step_utilization)}</td>" if steps else "")
        + "</tr>" for r in a.gpu.itertuples())
    note = f'<p class="muted">{_esc(STEP_BOUNDS_NOTE)}</p>' if steps else ""
    return f'<table class="data"><caption>GPU time</caption><tr>{head}</tr>{body}</table>{note}'


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
    """Per device, the host code each share of idle time lies in (analysis/gpu/idle.py)."""
    title = _esc(SECTIONS["idle"])
    devices = [b for b in a.burstiness if b.idle_causes]
    if not devices:
        return (f'<section id="idle"><h2>{title}</h2>'
                '<p class="empty">No idle time to attribute.</p></section>')
    tables = []
    keep = capped([sum(c["idle_us"] for c in b.idle_causes) for b in devices])
    more = more_rows(len(devices), len(keep), "devices", "most idle time")
    frames = any(c.get("frame") for i in keep for c in devices[i].idle_causes)  # none without stacks
    for b in (devices[i] for i in keep):
        rows = "".join(
            f"<tr><td><code>{_esc(cause_label(c))}</code></td><td>{duration_sig(c['idle_us'])}</td>"
            f"<td>{percent(c['share'])}</td>" + (f"<td>{_esc(c.get('frame') or '')}</td>" if frames else "")
            + "</tr>" for c in b.idle_causes)
        tables.append(f'<table class="data"><caption>{device_text(b.rank, b.device)}</caption>'
                      "<tr><th>host was in</th><th>idle</th><th>share of idle</th>"
                      + ("<th>mostly in (Python)</th>" if frames else "") + f"</tr>{rows}</table>")
    note = ("Each idle gap is read off the host thread that launched the work ending it and split "
            "by what that thread was doing: the innermost op or annotation open at each instant "
            "(ProfilerStep excluded; the innermost Python frame where neither is, when the trace has "
            "stacks). <i>(host idle / not traced)</i>: nothing recorded on that thread.")
    if more:
        tables.append(f'<p class="note">{_esc(more)}</p>')
    return f'<section id="idle"><h2>{title}</h2><p class="note">{note}</p>{"".join(tables)}</section>'


def _overlap_note(a) -> str:
    shared = overlap(a.findings)
    return "" if shared is None else (
        f'<p class="note"><b>Savings overlap:</b> {_esc(shared["note"])}.</p>')


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
            f'{SEVERITY_SHARES["medium"].value:.0%}).</p>{_overlap_note(a)}<ol>{"".join(items)}</ol>'
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


# -- small helpers ----------------------------------------------------------------------------


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
