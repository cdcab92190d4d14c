"""The terminal report's torch.compile section (analysis/gpu/dynamo.py): the compiled regions, the
graph breaks with the line each resumes at, compilations inside the loop, compiled vs eager GPU time."""
from __future__ import annotations

from rich.console import Console

from ...analysis.gpu.dynamo import resume_site
from ..common import percent, plain
from ...tables import Col, FittedTable
from ...units import duration


def compile_section(a, console: Console) -> None:
    """Absent when the trace shows no torch.compile."""
    use = a.compile
    if use is None:
        return
    console.print()
    frames = sorted(set(use.regions["frame"].tolist()))
    head = (f"[bold]torch.compile[/bold] ({use.iterations} traced iteration{'s' if use.iterations > 1 else ''}): "
            f"{int(use.regions['calls'].sum()):,} compiled region calls in {len(frames)} dynamo frame"
            f"{'s' if len(frames) != 1 else ''}")
    share = use.compiled_share
    if share is not None:
        head += (f"; GPU time in compiled graphs {percent(share)} ({duration(use.compiled_gpu_us)}), "
                 f"eager {duration(use.eager_gpu_us)}")
    console.print(head, highlight=False)
    for b in use.breaks:
        site = resume_site(b)
        where = plain(site) if site is not None else "a line the trace cannot name (record stacks)"
        console.print(f"  graph break: frame {b['frame']} resumes {where}, inside frame {b['parent']} "
                      f"({b['per_iteration']:.1f} per iteration)", highlight=False)
    if use.compiles:
        parts = ", ".join(f"iteration {c['iteration']}: {c['compile_id'] or '?'} {c['seconds']:.2f} s"
                          for c in use.compiles[:5])
        total = sum(c["seconds"] for c in use.compiles)
        console.print(f"  compiled inside the traced iterations: {len(use.compiles)} time"
                      f"{'s' if len(use.compiles) > 1 else ''}, {total:.2f} s ({parts}"
                      f"{', ...' if len(use.compiles) > 5 else ''})", highlight=False)
    if use.recompiled_frames:
        console.print(f"  recompiled frames (a cache entry above 0 ran): "
                      f"{', '.join(map(str, use.recompiled_frames))}", highlight=False)
    table = FittedTable("Compiled regions", Col("frame/\nentry"), Col("function", name=True),
                        Col("calls/iter", True), Col("host time", True), Col("opens in", True))
    for r in use.regions.itertuples():
        table.add_row(f"{r.frame}/{r.entry}", plain(r.function) if isinstance(r.function, str) else "-",
                      f"{r.calls / use.iterations:,.1f}", duration(r.host_us),
                      "-" if r.parent < 0 else f"frame {r.parent}")
    console.print(table)
