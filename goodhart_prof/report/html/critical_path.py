"""The HTML report's "Critical path" section (analysis/critical/path.py): the figures of the
terminal section (report/text/critical_path.py) as the page's tables: the path's length against
its window, host and GPU shares, the bound, the names holding most of the path with the path
recomputed without each, and the longest segments. Names from the trace are escaped here."""
from __future__ import annotations

from ...analysis.critical.path import TOP_OPS, longest_segments
from ...units import duration
from ..common import kernel_name, percent
from ..text.critical_path import BOUND
from .common import data_table, esc

KEY = "critical"
TITLE = "Critical path"


def critical_path_section(a) -> str:
    """The whole <section>: the shown path's figures, or the sentence saying why there is none."""
    cp = a.critical_path
    it = cp.shown if cp is not None else None
    head = f'<section id="{KEY}"><h2>{esc(TITLE)}</h2>'
    if it is None:
        why = cp.note if cp is not None and cp.note else "not computed for this trace"
        rank = f" (rank {cp.rank})" if cp is not None and cp.rank is not None else ""
        return f'{head}<p class="empty">No critical path{esc(rank)}: {esc(why)}.</p></section>'
    return head + _summary(cp, it) + _ops_table(it) + _segments_table(it) + "</section>"


def _summary(cp, it) -> str:
    where = (f"iteration {it.step}, the median by duration of {cp.total} found" if cp.scope == "iteration"
             else "the whole trace: no iterations found")
    return (f'<p class="note">Rank {cp.rank}, {esc(where)}: the longest chain of dependent host and GPU '
            f"work (HTA's graph; definitions in docs/DESIGN.md).</p>"
            f"<p><b>{duration(it.length_us)} of {duration(it.end - it.ts)}</b> (the window); "
            f"host {percent(it.host_share)} (ops {duration(it.host_us)}, launch waits "
            f"{duration(it.launch_us)}), GPU {percent(it.gpu_share)} (kernels {duration(it.gpu_us)}, "
            f"gaps between kernels {duration(it.gap_us)}): <b>{BOUND[it.bound]}</b>.</p>")


def _ops_table(it) -> str:
    if it.ops.empty:
        return ""
    without = {(w.name, w.side): w.path_without_us for w in it.what_if}
    rows = []
    for r in it.ops.head(TOP_OPS).itertuples():
        share = r.us / it.length_us if it.length_us > 0 else 0.0
        name = kernel_name(r.name) if r.side == "gpu" else str(r.name)
        rest = without.get((str(r.name), r.side))
        rows.append((f'<code title="{esc(r.name)}">{esc(name)}</code>', esc(r.side), duration(r.us),
                     percent(share), f"{r.count:,}", "-" if rest is None else duration(rest)))
    return data_table("On the path (time each name holds it; the path recomputed with that name's "
                      "time at 0)", ("name", "side", "time on path", "share", "events",
                                     "path without it"), rows)


def _segments_table(it) -> str:
    if len(it.segments) <= 1:
        return ""
    shown = longest_segments(it)
    rows = [(duration(s.ts - it.ts), duration(s.end - it.ts), duration(s.us), BOUND[s.side])
            for s in shown]
    return data_table(f"Segments ({len(shown)} longest of {len(it.segments)}, in time order)",
                      ("from (into the window)", "to", "on the path", "bound"), rows)
