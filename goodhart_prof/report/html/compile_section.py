"""The HTML report's "torch.compile" section (analysis/gpu/dynamo.py): the terminal section's figures
(report/text/compile_section.py) as the page's tables. Names from the trace are escaped here."""
from __future__ import annotations

from ...analysis.gpu.dynamo import resume_site
from ...units import duration
from ..common import percent
from .common import data_table, esc

KEY = "compile"
TITLE = "torch.compile"


def compile_section(a) -> str:
    """The whole <section>; the caller adds it only when the trace shows torch.compile."""
    use = a.compile
    parts = [f'<section id="{KEY}"><h2>{esc(TITLE)}</h2>']
    head = (f"{int(use.regions['calls'].sum()):,} compiled region calls in "
            f"{use.regions['frame'].nunique()} dynamo frame(s) over {use.iterations} traced iteration(s)")
    if use.compiled_share is not None:
        head += (f"; GPU time in compiled graphs <b>{percent(use.compiled_share)}</b> "
                 f"({duration(use.compiled_gpu_us)}), eager {duration(use.eager_gpu_us)}")
    parts.append(f"<p>{head}.</p>")
    if use.breaks:
        parts.append(data_table("Graph breaks (the code resumes in a frame of its own)",
                                ["resumes at", "frame", "inside frame", "per iteration"],
                                [[esc(resume_site(b) or "not named (record stacks)"), str(b["frame"]),
                                  str(b["parent"]),
                                  f"{b['per_iteration']:.1f}"] for b in use.breaks]))
    if use.compiles:
        parts.append(data_table("Compiled inside the traced iterations",
                                ["iteration", "frame/entry", "seconds"],
                                [[str(c["iteration"]), esc(c["compile_id"] or "?"), f"{c['seconds']:.2f}"]
                                 for c in use.compiles]))
    parts.append(data_table("Compiled regions (Torch-Compiled Region: frame/entry)",
                            ["frame/entry", "function", "calls per iteration", "host time", "opens in"],
                            [[f"{r.frame}/{r.entry}", esc(r.function) if isinstance(r.function, str) else "-",
                              f"{r.calls / use.iterations:,.1f}", duration(r.host_us),
                              "-" if r.parent < 0 else f"frame {r.parent}"] for r in use.regions.itertuples()]))
    return "".join(parts) + "</section>"
