"""The HTML report's "Frequent kernel sequences" section (analysis/gpu/kernel_sequences.py):
the sequences with most GPU time and the fusion candidates, as tables; full kernel names in
each cell's hover text."""
from __future__ import annotations

from ..common import count_text, kernel_name, percent
from .common import data_table, esc
from ..text.kernel_sequences import KERNEL_WIDTH, per_window
from ...units import bytes_text, duration_sig

KEY = "kernel-sequences"
TITLE = "Frequent kernel sequences"


def kernel_sequences_section(a) -> str:
    """The whole <section>: a sentence when there is no sequence."""
    ks = a.kernel_sequences
    head = f'<section id="{KEY}"><h2>{esc(TITLE)}</h2>'
    if ks is None or not (ks.sequences or ks.fusion):
        why = ks.note if ks is not None and ks.note else "not computed"
        return head + f'<p class="empty">No repeated kernel sequence: {esc(why)}.</p></section>'
    per = "per iteration" if ks.windows else "count"
    where = (f"{ks.kernels:,} kernels in {ks.windows:,} (rank, iteration) windows" if ks.windows
             else f"{ks.kernels:,} kernels, no iterations: counts over the trace")
    parts = [f'<p class="note">{esc(where)}. Most GPU time first; a sequence is counted without '
             'overlapping itself, and a kernel is in one sequence at most.</p>']
    if ks.sequences:
        parts.append(data_table(
            "Sequences with most GPU time", ("kernels in order", "launching ops", "n", per, "GPU time", "share"),
            [(_kernels(s), esc(s.op_chain or "-"), str(s.length), count_text(per_window(s.count, ks.windows)),
              duration_sig(s.total_us), percent(s.share)) for s in ks.sequences]))
    if ks.fusion:
        suffix = " per iteration" if ks.windows else ""
        parts.append(data_table(
            "Fusion candidates: eager elementwise/reduction/norm kernels in a row",
            ("launching ops", "site", "n", per, "GPU time", "share", f"launches fewer{suffix}",
             f"bytes not moved{suffix}"),
            [(esc(s.op_chain or "-"), esc(s.site or "-"), str(s.length),
              count_text(per_window(s.count, ks.windows)),
              duration_sig(s.total_us), percent(s.share), count_text(per_window(s.launches_saved, ks.windows)),
              bytes_text(per_window(s.bytes_saved, ks.windows)) if s.bytes_saved is not None else "unknown")
             for s in ks.fusion]))
        parts.append('<p class="note">Fused (torch.compile, or one fused op) a run is one launch instead '
                     'of n, and the tensors between its ops stay off memory (2 x each op\'s output but '
                     'the last, sized from record_shapes; unknown without them, or when one op launches them all).</p>')
    return head + "".join(parts) + "</section>"


def _kernels(s) -> str:
    """The kernels' short names, each with its full name as hover text."""
    return " &gt; ".join(f'<span title="{esc(k)}">{esc(kernel_name(k, KERNEL_WIDTH))}</span>'
                         for k in s.kernels)
