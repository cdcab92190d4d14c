"""The whole-trace tables of `goodhart-prof diff`'s terminal report: kernel categories, kernels,
sync points, GPU devices, phases, collectives, memory, achieved TFLOP/s.

A row whose figure is also measured per iteration (categories, kernels, phases, collectives: the
spread table; sync kinds: the exact counts) shows that figure's verdict; a row on one side only
says `only in A`/`only in B`; the tables with no per-iteration figures (devices, memory, TFLOP/s)
say in their title that they are not judged.
"""
from __future__ import annotations

from rich.console import Console

from ..common import percent
from ...units import bytes_text, duration
from .format import count, kernel_labels, num, ratio_text, signed_count, signed_us, verdicts
from ...tables import Col, fitted_table

ONLY = {"a_only": "only in A", "b_only": "only in B"}
WHOLE = "whole traces, not judged: no per-iteration samples"


def render(c, console: Console, top: int) -> None:
    for part in (_categories, _kernels, _syncs, _devices, _phases, _communication, _memory, _efficiency):
        part(c, console, top)


def _verdict(found: dict[str, str], key: str, presence: str) -> str:
    if presence in ONLY:
        return ONLY[presence]
    return found.get(key, "not judged")


def _side(value, presence: str, side: str, text=duration) -> str:
    return "-" if presence == f"{'b' if side == 'a' else 'a'}_only" else text(value)


def _print(console: Console, title: str, cols, rows) -> None:
    console.print()
    console.print(fitted_table(title, cols, rows, console.width))


def _categories(c, console: Console, top: int) -> None:
    if c.categories.empty:
        return
    found = verdicts(c, "category")
    rows = [(str(r.category), _side(r.total_us_a, r.presence, "a"), _side(r.total_us_b, r.presence, "b"),
             signed_us(r.total_us_delta), ratio_text(r.total_us_ratio, r.total_us_a),
             _verdict(found, str(r.category), r.presence), count(r.count_a), count(r.count_b))
            for r in c.categories.itertuples()]
    _print(console, "Kernel categories (GPU time)", (
        Col("category", name=True), Col("A", True), Col("B", True), Col("change", True),
        Col("ratio", True, drop=1), Col("verdict"), Col("count A", True, drop=2), Col("count B", True, drop=2)),
        rows)


def _kernels(c, console: Console, top: int) -> None:
    if c.kernels.empty:
        return
    found = verdicts(c, "kernel")
    k = c.kernels.head(top)
    labels = kernel_labels(k["name"].astype(str).tolist())
    rows = [(label, str(r.category), _side(r.total_us_a, r.presence, "a"), _side(r.total_us_b, r.presence, "b"),
             signed_us(r.total_us_delta), ratio_text(r.total_us_ratio, r.total_us_a),
             _verdict(found, str(r.name), r.presence), count(r.count_a), count(r.count_b))
            for label, r in zip(labels, k.itertuples())]
    _print(console, f"Top {len(k)} of {len(c.kernels)} kernels (GPU time, by the larger of A, B)", (
        Col("kernel", name=True), Col("category", drop=3), Col("A", True), Col("B", True), Col("change", True),
        Col("ratio", True, drop=1), Col("verdict"), Col("count A", True, drop=2), Col("count B", True, drop=2)),
        rows)


def _syncs(c, console: Console, top: int) -> None:
    kinds = c.sync_kinds[(c.sync_kinds["count_a"] > 0) | (c.sync_kinds["count_b"] > 0)]
    console.print()
    if kinds.empty:
        console.print("[bold]Sync points[/bold]: none in either trace")
        return
    counts = c.counts
    found = {} if counts is None or counts.empty else {
        str(r.item): (r.verdict if isinstance(r.verdict, str) else "same")
        for r in counts[counts["kind"] == "sync"].itertuples()}
    rows = [(str(r.kind), count(r.count_a), count(r.count_b), signed_count(r.count_delta),
             found.get(str(r.kind), "not judged"), duration(r.total_us_a), duration(r.total_us_b),
             signed_us(r.total_us_delta)) for r in kinds.itertuples()]
    console.print(fitted_table("Sync points by kind (whole traces; verdict: the exact count per iteration)", (
        Col("kind", name=True), Col("A", True), Col("B", True), Col("change", True), Col("verdict"),
        Col("host wait A", True, drop=1), Col("host wait B", True, drop=1), Col("wait change", True, drop=2)),
        rows, console.width))
    rows = [(str(r.site), str(r.kind), count(r.count_a), count(r.count_b), signed_count(r.count_delta),
             signed_us(r.total_us_delta)) for r in c.sync_sites.head(top).itertuples()]
    _print(console, "Sync points by site (whole traces)", (
        Col("site", name=True), Col("kind", drop=2), Col("A", True), Col("B", True), Col("change", True),
        Col("wait change", True, drop=1)), rows)


def _devices(c, console: Console, top: int) -> None:
    """One row per device and figure: utilization, busy time, idle gaps, the gaps' p90, host wait."""
    if c.devices.empty:
        return
    rows = []
    for r in c.devices.itertuples():
        figures = (("utilization", percent(r.utilization_a), percent(r.utilization_b),
                    f"{100 * r.utilization_delta:+.1f} pt" if num(r.utilization_delta) else "-"),
                   ("busy", duration(r.busy_us_a), duration(r.busy_us_b), signed_us(r.busy_us_delta)),
                   ("idle gaps", count(r.gap_count_a), count(r.gap_count_b), signed_count(r.gap_count_delta)),
                   ("gap p90", duration(r.gap_p90_us_a), duration(r.gap_p90_us_b), signed_us(r.gap_p90_us_delta)),
                   ("host wait", duration(r.host_wait_us_a), duration(r.host_wait_us_b),
                    signed_us(r.host_wait_us_delta)))
        rows += [(str(r.label) if i == 0 else "", *f) for i, f in enumerate(figures)]
    _print(console, f"GPU devices ({WHOLE})", (
        Col("device", name=True), Col("figure"), Col("A", True), Col("B", True), Col("change", True)), rows)


def _phases(c, console: Console, top: int) -> None:
    if c.phases.empty:
        return
    found = verdicts(c, "phase")
    ph = c.phases.head(top)
    gpu = bool((ph[["gpu_us_a", "gpu_us_b"]].fillna(0) > 0).any().any())
    syncs = bool((ph[["syncs_a", "syncs_b"]].fillna(0) > 0).any().any())
    rows = []
    for r in ph.itertuples():
        row = (str(r.name), _side(r.cpu_us_a, r.presence, "a"), _side(r.cpu_us_b, r.presence, "b"),
               signed_us(r.cpu_us_delta), ratio_text(r.cpu_us_ratio, r.cpu_us_a),
               _verdict(found, str(r.name), r.presence))
        row += (duration(r.gpu_us_a), duration(r.gpu_us_b)) if gpu else ()
        row += (count(r.syncs_a), count(r.syncs_b)) if syncs else ()
        rows.append(row)
    cols = [Col("phase", name=True), Col("A", True), Col("B", True), Col("change", True),
            Col("ratio", True, drop=2), Col("verdict")]
    cols += [Col("GPU A", True, drop=1), Col("GPU B", True, drop=1)] if gpu else []
    cols += [Col("syncs A", True, drop=3), Col("syncs B", True, drop=3)] if syncs else []
    _print(console, "Phases (annotations, CPU time, whole traces; verdict: per iteration)", cols, rows)


def _communication(c, console: Console, top: int) -> None:
    comm = c.communication
    if comm.empty:
        return
    found = verdicts(c, "communication")
    rows = [(str(r.kind), _side(r.total_us_a, r.presence, "a"), _side(r.total_us_b, r.presence, "b"),
             signed_us(r.total_us_delta), ratio_text(r.total_us_ratio, r.total_us_a),
             _verdict(found, str(r.kind), r.presence), count(r.count_a), count(r.count_b))
            for r in comm.itertuples()]
    _print(console, "Communication by collective (kernel time, all ranks)", (
        Col("collective", name=True), Col("A", True), Col("B", True), Col("change", True),
        Col("ratio", True, drop=1), Col("verdict"), Col("count A", True, drop=2), Col("count B", True, drop=2)),
        rows)


def _memory(c, console: Console, top: int) -> None:
    """Peak allocated/reserved, allocations and growth per iteration per device (memory.py)."""
    if c.memory is None or c.memory.empty:
        return
    rows = []
    for r in c.memory.itertuples():
        figures = (("peak allocated", bytes_text(r.peak_allocated_a), bytes_text(r.peak_allocated_b)),
                   ("peak reserved", bytes_text(r.peak_reserved_a), bytes_text(r.peak_reserved_b)),
                   ("allocations per iteration", count(r.allocations_per_iteration_a),
                    count(r.allocations_per_iteration_b)),
                   ("growth per iteration", bytes_text(r.growth_per_iteration_a, signed=True),
                    bytes_text(r.growth_per_iteration_b, signed=True)))
        rows += [(str(r.label) if i == 0 else "", *f) for i, f in enumerate(figures)]
    _print(console, f"Memory ({WHOLE})", (Col("device", name=True), Col("figure"), Col("A", True),
                                          Col("B", True)), rows)


def _efficiency(c, console: Console, top: int) -> None:
    """Achieved TFLOP/s per op type, A against B (analysis/gpu/efficiency.py)."""
    eff = getattr(c, "efficiency", None)
    if eff is None or eff.empty:
        return
    rows = [(str(r.op), _tflops(r.tflops_a, r.count_a), _tflops(r.tflops_b, r.count_b),
             ratio_text(r.tflops_ratio) if r.count_a and r.count_b else "-",
             duration(r.time_us_a) if r.count_a else "-", duration(r.time_us_b) if r.count_b else "-",
             count(r.count_a), count(r.count_b)) for r in eff.itertuples()]
    _print(console, f"Achieved TFLOP/s per op type ({WHOLE})", (
        Col("op", name=True), Col("A", True), Col("B", True), Col("ratio", True), Col("time A", True, drop=1),
        Col("time B", True, drop=1), Col("count A", True, drop=2), Col("count B", True, drop=2)), rows)


def _tflops(value, n) -> str:
    return f"{value:,.2f} TFLOP/s" if n and num(value) else "-"
