"""The terminal report's critical path section (analysis/critical/path.py)."""
from __future__ import annotations

from rich.console import Console

from ...analysis.critical.path import TOP_OPS, longest_segments
from ..common import kernel_name, percent
from ...tables import Col, FittedTable
from ...units import duration

BOUND = {"host": "host-bound", "gpu": "GPU-bound"}


def render_critical_path(a, console: Console) -> None:
    """The path's length and its host / GPU shares, the ops on it, its longest segments; absent
    when it was not computed or the trace has no GPU activity."""
    cp = a.critical_path
    it = cp.shown if cp is not None else None
    if it is None:
        if cp is not None and cp.rank is not None and cp.note:  # a rank with GPU work, no path: why
            console.print()
            console.print(f"[bold]Critical path[/bold] (rank {cp.rank}): {cp.note}", highlight=False)
        return
    console.print()
    where = (f"iteration {it.step}, the median by duration of {cp.total} found" if cp.scope == "iteration"
             else "the whole trace: no iterations found")
    console.print(f"[bold]Critical path[/bold] (rank {cp.rank}, {where}): "
                  f"{duration(it.length_us)} of a {duration(it.end - it.ts)} window", highlight=False)
    console.print(f"  host {percent(it.host_share)} (ops {duration(it.host_us)}, launch waits "
                  f"{duration(it.launch_us)}), GPU {percent(it.gpu_share)} (kernels "
                  f"{duration(it.gpu_us)}, gaps between kernels {duration(it.gap_us)}): "
                  f"{BOUND[it.bound]}", highlight=False)
    if not it.ops.empty:
        without = {(w.name, w.side): w.path_without_us for w in it.what_if}
        table = FittedTable("On the path (time it holds; the path without it: its time at 0)",
                            Col("name", name=True),
                            Col("side"), Col("time on\npath", True), Col("share", True),
                            Col("events", True), Col("path\nwithout it", True))
        for r in it.ops.head(TOP_OPS).itertuples():
            share = r.us / it.length_us if it.length_us > 0 else 0.0
            name = kernel_name(r.name) if r.side == "gpu" else str(r.name)
            rest = without.get((str(r.name), r.side))
            table.add_row(name, r.side, duration(r.us), percent(share),
                          f"{r.count:,}", "-" if rest is None else duration(rest))
        console.print(table)
    segments = longest_segments(it)
    if len(it.segments) > 1:
        table = FittedTable(f"Segments ({len(segments)} longest of {len(it.segments)}, in time order)",
                            Col("from (into\nthe window)", True), Col("to", True), Col("on the\npath", True),
                            Col("bound"))
        for s in segments:
            table.add_row(duration(s.ts - it.ts), duration(s.end - it.ts), duration(s.us), BOUND[s.side])
        console.print(table)
