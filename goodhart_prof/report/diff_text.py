"""The terminal report of `goodhart-prof diff`: rich tables of a `Comparison`, headline first."""
from __future__ import annotations

import pandas as pd
from rich.console import Console

from .common import bytes_text, duration, kernel_name, make_table, one_line, percent, plain, safe_text, short

BETTER_STYLE, WORSE_STYLE = "green", "red"


def _num(value) -> bool:
    return value is not None and value == value


def _signed_us(value: float) -> str:
    if not _num(value):
        return "-"
    return ("+" if value > 0 else "-" if value < 0 else "") + duration(abs(value))


def _ratio(value: float, a: float | None = None) -> str:
    if _num(value):
        return f"{value:.2f}x"
    return "new" if a == 0 else "-"


def _count(value) -> str:
    return f"{value:,.0f}" if _num(value) else "-"


def _signed_count(value) -> str:
    return f"{value:+,.0f}" if _num(value) else "-"


def _summary_value(metric: str, value: float, signed: bool = False) -> str:
    if metric.endswith("_us"):
        return _signed_us(value) if signed else duration(value)
    if metric == "gpu_utilization":
        if not _num(value):
            return "-"
        return f"{100 * value:+.1f} pt" if signed else percent(value)
    if metric in ("exposed_comm_per_iteration_us", "straggler_wait_per_iteration_us") and not _num(value):
        return "-"
    if metric == "syncs_per_iteration":
        return "-" if not _num(value) else (f"{value:+,.2f}" if signed else f"{value:,.2f}")
    return _signed_count(value) if signed else _count(value)


def render(c, console: Console, top: int = 15) -> None:
    for side, analysis in (("A", c.a), ("B", c.b)):
        paths = analysis.trace.paths
        console.print(f"[bold]{side}[/bold]: {', '.join(plain(p) for p in paths[:3])}"
                      f"{' …' if len(paths) > 3 else ''}")
    if c.iterations_line:
        console.print(c.iterations_line, highlight=False)
    _summary(c, console)
    _headline(c, console, top)
    _noise(c, console, top)
    _counts(c, console)
    _categories(c, console)
    _kernels(c, console, top)
    _syncs(c, console, top)
    _devices(c, console)
    _phases(c, console, top)
    _communication(c, console)
    _memory(c, console)
    _efficiency(c, console)


def _summary(c, console: Console) -> None:
    console.print()
    if _no_gpu_either(c):
        console.print("Neither trace has GPU activity (CPU-only runs): the GPU figures are left out.")
    table = make_table("Summary (B - A)", "metric", "A", "B", "delta", "ratio", right=(1, 2, 3, 4))
    no_gpu = _no_gpu_either(c)
    for r in c.summary.itertuples():
        if r.metric in no_gpu:  # neither trace has GPU activity: rows of zeros say nothing
            continue
        table.add_row(r.metric, _summary_value(r.metric, r.a), _summary_value(r.metric, r.b),
                      _summary_value(r.metric, r.delta, signed=True), _ratio(r.ratio, r.a))
    console.print(table)


GPU_METRICS = ("gpu_busy_us", "gpu_span_us", "gpu_utilization", "kernel_us", "iteration_gpu_us")


def _no_gpu_either(c) -> tuple[str, ...]:
    """The GPU metrics of the summary when neither trace has GPU activity (else none)."""
    spans = c.summary.set_index("metric")[["a", "b"]].reindex(["gpu_span_us"]).fillna(0.0)
    return GPU_METRICS if bool((spans.to_numpy() == 0).all()) else ()


def _value(metric: str, value) -> str:
    if not _num(value):
        return "-"
    if metric == "time_us":
        return duration(value)
    if metric == "env_steps_per_s":
        return f"{value:,.0f}"
    if metric == "count_per_iteration":
        return f"{value:,.2f}"
    return _count(value)


def _signed(metric: str, value) -> str:
    if not _num(value):
        return "-"
    if metric == "time_us":
        return _signed_us(value)
    return ("+" if value > 0 else "") + _value(metric, value)


def _interval(metric: str, low, high) -> str:
    return f"{_value(metric, low)}-{_value(metric, high)}" if _num(low) and _num(high) else ""


def _headline(c, console: Console, top: int) -> None:
    console.print()
    console.print(f"[bold]Machine speed[/bold]: {c.speed_check}", highlight=False)
    if c.time_statement:
        console.print(f"[bold]Time[/bold]: {c.time_statement}", highlight=False)
    for verdict, frame, style in (("better", c.better, BETTER_STYLE), ("worse", c.worse, WORSE_STYLE)):
        console.print()
        if frame.empty:
            console.print(f"[bold {style}]What got {verdict}[/bold {style}]: nothing")
            continue
        table = make_table(f"What got {verdict} ({min(top, len(frame))} of {len(frame)}, by impact)",
                           "item", "kind", "A", "B", "delta", "ratio", "impact", "A interval", "B interval",
                           right=(2, 3, 4, 5, 6))
        for r in frame.head(top).itertuples():
            item = short(r.item, 80) + (f" at {short(r.site, 70)}" if isinstance(r.site, str) and r.site else "")
            unit = " /it" if r.metric == "count_per_iteration" else ""
            table.add_row(safe_text(item, style=style), r.kind, _value(r.metric, r.a) + unit,
                          _value(r.metric, r.b) + unit, _signed(r.metric, r.delta), _ratio(r.ratio, r.a),
                          duration(r.impact_us) if _num(r.impact_us) else "-",
                          _interval(r.metric, r.low_a, r.high_a), _interval(r.metric, r.low_b, r.high_b))
        console.print(table)
    noise = c.within_noise
    if len(noise):
        names = [_noise_name(r) for r in noise.itertuples()]
        more = f" and {len(names) - top} more" if len(names) > top else ""
        console.print()
        console.print(f"[bold]within noise[/bold]: {plain(', '.join(names[:top]))}{more} (intervals overlap)",
                      highlight=False)


def _counts(c, console: Console) -> None:
    """Exact counts: sync points and host reads per kind, GPU kernels (per iteration when both
    sides have counted iterations)."""
    counts = c.counts
    if counts is None or counts.empty:
        return
    per_it = bool(counts["per_iteration"].iloc[0])
    metric = "count_per_iteration" if per_it else "count"
    names = {"sync": "sync points", "host_read": "host reads (CPU-only)", "kernels": "GPU kernels"}
    console.print()
    table = make_table(f"Counts {'per iteration' if per_it else '(whole traces)'} (exact)", "kind", "what",
                       "A", "B", "delta", "verdict", "site that changed most", right=(2, 3, 4))
    for r in counts.itertuples():
        table.add_row(r.item, names.get(r.kind, r.kind), _value(metric, r.a), _value(metric, r.b),
                      _signed(metric, r.delta), r.verdict if isinstance(r.verdict, str) else "same",
                      short(r.site, 70) if isinstance(r.site, str) else "")
    console.print(table)


def _noise_name(r) -> str:
    return r.item if r.kind in ("iteration", "throughput", "phase") else f"{r.kind} {short(r.item, 50)}"


def _noise(c, console: Console, top: int) -> None:
    """Every time figure with its median and interval per side (kernels: the top ones)."""
    spread = c.spread
    if spread is None or spread.empty:
        return
    shown = pd.concat([spread[spread["kind"] != "kernel"], spread[spread["kind"] == "kernel"].head(top)])
    console.print()
    table = make_table("Per iteration: median and interval over the counted iterations", "figure", "kind",
                       "A", "A interval", "B", "B interval", "delta", "verdict", right=(2, 3, 4, 5, 6))
    for r in shown.itertuples():
        table.add_row(short(r.item, 50), r.kind, _value(r.metric, r.a), _interval(r.metric, r.low_a, r.high_a),
                      _value(r.metric, r.b), _interval(r.metric, r.low_b, r.high_b), _signed(r.metric, r.delta),
                      r.verdict)
    console.print(table)


def _categories(c, console: Console) -> None:
    if c.categories.empty:
        return
    console.print()
    table = make_table("Kernel categories (GPU time)", "category", "A", "B", "delta", "ratio", "count A",
                   "count B", right=(1, 2, 3, 4, 5, 6))
    for r in c.categories.itertuples():
        table.add_row(r.category, duration(r.total_us_a), duration(r.total_us_b), _signed_us(r.total_us_delta),
                      _ratio(r.total_us_ratio, r.total_us_a), _count(r.count_a), _count(r.count_b))
    console.print(table)


def _kernels(c, console: Console, top: int) -> None:
    if c.kernels.empty:
        return
    console.print()
    table = make_table(f"Top {min(top, len(c.kernels))} of {len(c.kernels)} kernels (by the larger of A, B)",
                   "kernel", "category", "A", "B", "delta", "ratio", "count A", "count B",
                   right=(2, 3, 4, 5, 6, 7))
    for r in c.kernels.head(top).itertuples():
        table.add_row(one_line(kernel_name(r.name, 90)), r.category, duration(r.total_us_a), duration(r.total_us_b),
                      _signed_us(r.total_us_delta), _ratio(r.total_us_ratio, r.total_us_a),
                      _count(r.count_a), _count(r.count_b))
    console.print(table)


def _syncs(c, console: Console, top: int) -> None:
    kinds = c.sync_kinds[(c.sync_kinds["count_a"] > 0) | (c.sync_kinds["count_b"] > 0)]
    console.print()
    if kinds.empty:
        console.print("[bold]Sync points[/bold]: none in either trace")
        return
    table = make_table("Sync points by kind", "kind", "A", "B", "delta", "host wait A", "host wait B",
                   "wait delta", right=(1, 2, 3, 4, 5, 6))
    for r in kinds.itertuples():
        table.add_row(r.kind, _count(r.count_a), _count(r.count_b), _signed_count(r.count_delta),
                      duration(r.total_us_a), duration(r.total_us_b), _signed_us(r.total_us_delta))
    console.print(table)
    console.print()
    sites = make_table("Sync points by site", "site", "kind", "A", "B", "delta", "wait delta",
                   right=(2, 3, 4, 5))
    for r in c.sync_sites.head(top).itertuples():
        sites.add_row(short(r.site, 100), r.kind, _count(r.count_a), _count(r.count_b),
                      _signed_count(r.count_delta), _signed_us(r.total_us_delta))
    console.print(sites)


def _devices(c, console: Console) -> None:
    if c.devices.empty:
        return
    console.print()
    table = make_table("GPU devices", "device", "util A", "util B", "delta", "busy A", "busy B",
                   "gaps A", "gaps B", "gap p90 A", "gap p90 B", "host wait A", "host wait B",
                   right=tuple(range(1, 12)))
    for r in c.devices.itertuples():
        delta = f"{100 * r.utilization_delta:+.1f} pt" if _num(r.utilization_delta) else "-"
        table.add_row(r.label, percent(r.utilization_a), percent(r.utilization_b), delta, duration(r.busy_us_a),
                      duration(r.busy_us_b), _count(r.gap_count_a), _count(r.gap_count_b),
                      duration(r.gap_p90_us_a), duration(r.gap_p90_us_b), duration(r.host_wait_us_a),
                      duration(r.host_wait_us_b))
    console.print(table)


def _phases(c, console: Console, top: int) -> None:
    if c.phases.empty:
        return
    console.print()
    table = make_table("Phases (annotations, CPU time)", "phase", "A", "B", "delta", "ratio", "GPU A",
                   "GPU B", "syncs A", "syncs B", right=tuple(range(1, 9)))
    for r in c.phases.head(top).itertuples():
        table.add_row(short(r.name, 60), duration(r.cpu_us_a), duration(r.cpu_us_b), _signed_us(r.cpu_us_delta),
                      _ratio(r.cpu_us_ratio, r.cpu_us_a), duration(r.gpu_us_a), duration(r.gpu_us_b),
                      _count(r.syncs_a), _count(r.syncs_b))
    console.print(table)


def _communication(c, console: Console) -> None:
    comm = c.communication
    if comm.empty:
        return
    console.print()
    table = make_table("Communication by collective (kernel time, all ranks)", "collective", "A", "B",
                       "delta", "ratio", "count A", "count B", right=(1, 2, 3, 4, 5, 6))
    for r in comm.itertuples():
        table.add_row(r.kind, duration(r.total_us_a), duration(r.total_us_b), _signed_us(r.total_us_delta),
                      _ratio(r.total_us_ratio, r.total_us_a), _count(r.count_a), _count(r.count_b))
    console.print(table)


def _memory(c, console: Console) -> None:
    """Peak allocated/reserved and allocations per iteration per device (analysis/memory.py)."""
    if c.memory is None or c.memory.empty:
        return
    console.print()
    table = make_table("Memory", "device", "peak alloc A", "peak alloc B", "peak reserved A",
                       "peak reserved B", "allocs/it A", "allocs/it B", "growth/it A", "growth/it B",
                       right=tuple(range(1, 9)))
    for r in c.memory.itertuples():
        table.add_row(r.label, bytes_text(r.peak_allocated_a), bytes_text(r.peak_allocated_b),
                      bytes_text(r.peak_reserved_a), bytes_text(r.peak_reserved_b),
                      _count(r.allocations_per_iteration_a), _count(r.allocations_per_iteration_b),
                      bytes_text(r.growth_per_iteration_a, signed=True),
                      bytes_text(r.growth_per_iteration_b, signed=True))
    console.print(table)


def _efficiency(c, console: Console) -> None:
    """Achieved TFLOP/s per op type, A against B (analysis/efficiency.py)."""
    eff = getattr(c, "efficiency", None)
    if eff is None or eff.empty:
        return
    console.print()
    table = make_table("Achieved TFLOP/s per op type (GEMM, conv, attention)", "op", "A", "B", "ratio",
                       "time A", "time B", "count A", "count B", right=tuple(range(1, 8)))
    for r in eff.itertuples():
        table.add_row(short(r.op, 60), _tflops(r.tflops_a, r.count_a), _tflops(r.tflops_b, r.count_b),
                      _ratio(r.tflops_ratio) if r.count_a and r.count_b else "-", duration(r.time_us_a),
                      duration(r.time_us_b), _count(r.count_a), _count(r.count_b))
    console.print(table)


def _tflops(value, count) -> str:
    return f"{value:,.2f}" if count and _num(value) else "-"
