"""The terminal report's frequent kernel sequences and fusion candidates
(analysis/gpu/kernel_sequences.py)."""
from __future__ import annotations

from rich.console import Console

from ..common import count_text, kernel_name, percent
from ...tables import Col, FittedTable
from ...units import bytes_text, duration

KERNEL_WIDTH = 28  # each kernel's short name in a sequence's cell


def kernels_text(s) -> str:
    """A sequence's kernels in order, short names (`vectorized_elementwise_kernel<...> > ...`)."""
    return " > ".join(kernel_name(k, KERNEL_WIDTH) for k in s.kernels)


def per_window(value: float | None, windows: int) -> float | None:
    """A count over the trace per (rank, iteration) window; the count itself without windows."""
    if value is None:
        return None
    return value / windows if windows else float(value)


def render_kernel_sequences(a, console: Console) -> None:
    """Both tables; absent when not computed or no sequence repeats."""
    ks = a.kernel_sequences
    if ks is None or not (ks.sequences or ks.fusion):
        return
    per = "/iter." if ks.windows else "count"
    where = (f"{ks.kernels:,} kernels in {ks.windows:,} (rank, iteration) windows" if ks.windows
             else f"{ks.kernels:,} kernels, no iterations: over the trace")
    if ks.sequences:
        console.print()
        table = FittedTable("Frequent kernel sequences (most GPU time first)",
                            Col("kernels in order", name=True),
                            Col("launching ops", name=True), Col("n", True),
                            *((Col("count", True, drop=2),) if ks.windows else ()),
                            Col(per, True), Col("GPU\ntime", True), Col("share", True))
        for s in ks.sequences:
            table.add_row(kernels_text(s), s.op_chain or "-", str(s.length),
                          *((f"{s.count:,}",) if ks.windows else ()),
                          count_text(per_window(s.count, ks.windows)), duration(s.total_us), percent(s.share))
        console.print(table)
        console.print(f"  {where}; a sequence is counted without overlapping itself, a kernel is in "
                      "one sequence at most.", highlight=False)
    if ks.fusion:
        console.print()
        table = FittedTable("Fusion candidates (eager elementwise/reduction/norm kernels in a row)",
                            Col("launching ops", name=True),
                            Col("site", name=True, drop=2), Col("n", True), Col(per, True),
                            Col("GPU\ntime", True), Col("share", True, drop=1),
                            Col(f"launches\nfewer{' /iter.' if ks.windows else ''}", True),
                            Col(f"bytes not\nmoved{' /iter.' if ks.windows else ''}", True))
        for s in ks.fusion:
            table.add_row(s.op_chain or kernels_text(s), s.site or "-", str(s.length),
                          count_text(per_window(s.count, ks.windows)), duration(s.total_us), percent(s.share),
                          count_text(per_window(s.launches_saved, ks.windows)),
                          bytes_text(per_window(s.bytes_saved, ks.windows)) if s.bytes_saved is not None
                          else "unknown")
        console.print(table)
        console.print("  Fused (torch.compile, or one fused op) a run is one launch instead of n, and "
                      "the tensors between its ops stay off memory (2 x each op's output but the last; "
                      "unknown without record_shapes, or when one op launches them all).", highlight=False)
