"""The terminal report: rich tables, one section per analysis, findings last."""
from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.padding import Padding

from ..common import capped, evidence_lines, kernel_name, more_rows, percent, plain, saving_text
from ...tables import Col, FittedTable, safe_text
from ...units import bytes_text, device_key, device_text, duration
from ...analysis.gpu.device_time import unrecorded_gpu
from ...analysis.memory.usage import HOST
from ...analysis.rules.savings import overlap
from ...analysis.recorder import record_full_advice
from ...analysis.host.syncs import CPU_NO_READS_NOTE, CPU_READS_NOTE
from ...analysis.gpu.compiled import display_name
from ...analysis.gpu.idle import cause_label
from .setup import STEP_BOUNDS_NOTE, iterations_line, setup_line, sites_line
from .communication import communication_section, ranks_section
from .compile_section import compile_section
from .cupti_section import cupti_section
from .critical_path import render_critical_path
from .kernel_sequences import render_kernel_sequences
from .efficiency import efficiency_section

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan"}


def render(a, console: Console, top: int = 15) -> None:
    t = a.trace
    console.print(f"[bold]goodhart-prof analyze[/bold] {', '.join(plain(p) for p in t.paths[:3])}"
                  f"{' …' if len(t.paths) > 3 else ''}")
    console.print(f"{len(t.events):,} events · ranks {t.ranks} (from {plain(t.rank_source)}) · "
                  f"{len(t.devices)} GPU device(s)" + _unrecorded_note(t))
    for warning in t.warnings:
        console.print(f"[yellow]warning:[/yellow] {plain(warning)}")
    console.print(plain(iterations_line(t)), highlight=False)
    borrowed = sites_line(t)
    if borrowed:
        console.print(plain(borrowed), highlight=False)
    once = setup_line(t)
    if once:
        console.print(plain(once), highlight=False)
    _gpu(a, console)
    _kernels(a, console, top)
    _host_ops(a, console, top)
    _syncs(a, console, top)
    _burstiness(a, console)
    _phases(a, console, top)
    communication_section(a, console)
    ranks_section(a, console)
    _memory(a, console)
    efficiency_section(a, console, top)
    render_critical_path(a, console)
    render_kernel_sequences(a, console)
    compile_section(a, console)
    cupti_section(a, console)
    _findings(a, console)


def _unrecorded_note(t) -> str:
    """After "0 GPU device(s)" in a trace whose GPU activity was not recorded: that it was not."""
    missing = unrecorded_gpu(t)
    if not missing:
        return ""
    return (f" with recorded activity ({missing.listed} listed in deviceProperties, "
            f"{missing.launches:,} launch calls: GPU activity not recorded)")


def _gpu(a, console: Console) -> None:
    console.print()
    if a.gpu.empty:
        missing = unrecorded_gpu(a.trace)
        console.print("[bold]GPU time[/bold]: " + (plain(missing.text()) if missing else
                                                   "no GPU activity in this trace (a CPU-only run?)"),
                      highlight=False)
        return
    steps = bool(a.gpu["step_utilization"].notna().any())
    table = FittedTable("GPU time", Col("rank/device"), Col("span", True), Col("busy", True),
                        Col("idle", True, drop=1), Col("util.", True), Col("kernel\ntime", True, drop=1),
                        *((Col("idle\nin steps", True), Col("util.\nin steps", True)) if steps else ()))
    keep = capped(a.gpu["idle_us"].to_numpy(float))
    for r in a.gpu.iloc[keep].itertuples():
        table.add_row(device_text(r.rank, r.device), duration(r.span_us), duration(r.busy_us), duration(r.idle_us),
                      percent(r.utilization), duration(r.kernel_us),
                      *((duration(r.step_idle_us), percent(r.step_utilization)) if steps else ()))
    console.print(table)
    _more(console, len(a.gpu), len(keep), "devices", "most idle time")
    if steps:
        console.print(STEP_BOUNDS_NOTE, highlight=False)


def _kernels(a, console: Console, top: int) -> None:
    if a.kernels.empty:
        return
    console.print()
    table = FittedTable(f"Top {min(top, len(a.kernels))} of {len(a.kernels)} GPU kernels by total time",
                        Col("kernel", name=True), Col("category"), Col("library", drop=2), Col("count", True),
                        Col("total", True), Col("mean", True, drop=1), Col("share", True))
    for r in a.kernels.head(top).itertuples():
        table.add_row(kernel_name(r.name), r.category, getattr(r, "library", ""), f"{r.count:,}",
                      duration(r.total_us), duration(r.mean_us), f"{r.pct:.1f}%")
    console.print(table)
    console.print()
    cats = FittedTable("Kernel categories", Col("category", name=True), Col("main\nlibrary"), Col("count", True),
                       Col("total", True), Col("share", True))
    for r in a.categories.itertuples():
        cats.add_row(r.category, getattr(r, "library", ""), f"{r.count:,}", duration(r.total_us),
                     f"{r.pct:.1f}%")
    console.print(cats)
    if not a.libraries.empty:
        console.print()
        libs = FittedTable("Kernel libraries", Col("library", name=True), Col("count", True), Col("total", True),
                           Col("share", True))
        for r in a.libraries.itertuples():
            libs.add_row(r.library, f"{r.count:,}", duration(r.total_us), f"{r.pct:.1f}%")
        console.print(libs)


def _syncs(a, console: Console, top: int) -> None:
    s, reads = a.syncs, a.reads
    console.print()
    if reads is not None and reads.total:
        _by_site(console, reads, top, "[bold]Host reads[/bold] on CPU-only rank(s)", "host time",
                 ". " + CPU_READS_NOTE)
        if not s.total:
            return
    if not s.total and a.gpu.empty and unrecorded_gpu(a.trace) is None:
        console.print("[bold]Sync points[/bold]: none, " + CPU_NO_READS_NOTE, highlight=False)
        return
    if not s.total:
        console.print("[bold]Sync points[/bold]: none (the host never waited for the device)")
        return
    _by_site(console, s, top, "[bold]Sync points[/bold]", "host wait")
    per_it = s.per_iteration
    if per_it is not None and not per_it.empty and (per_it["iteration"] >= 0).any():
        counts = per_it[per_it["iteration"] >= 0].groupby("iteration")["count"].sum()
        console.print("per iteration: " + ", ".join(f"#{int(i)}: {int(c)}" for i, c in counts.items()))


def _by_site(console: Console, summary, top: int, label: str, time_label: str, note: str = "") -> None:
    """A sync summary (sync points or host reads): total per kind, then the top sites."""
    kinds = ", ".join(f"{k} {v}" for k, v in summary.by_kind.items() if v)
    console.print(f"{label}: {summary.total} ({kinds}){note}")
    shown = summary.sites.head(top)
    side = "background" in shown and bool(shown["background"].any())
    table = FittedTable("by site", Col("site", name=True), Col("kind"), *([Col("thread")] if side else []),
                        Col("count", True), Col(time_label, True))
    for r in shown.itertuples():
        table.add_row(r.site, r.kind, *(["background" if r.background else ""] if side else []),
                      f"{r.count:,}", duration(r.total_us))
    console.print(table)
    if side:
        console.print("thread background: a host thread that launches no GPU work (in the trace), so its waits "
                      "hold up no launch; no finding counts them as stalls of the training loop",
                      highlight=False)


def _burstiness(a, console: Console) -> None:
    if not a.burstiness:
        return
    console.print()
    table = FittedTable("Burstiness (idle gaps between busy stretches)", Col("rank/device"), Col("util CV", True),
                        Col("B", True), Col("gaps", True), Col("p50", True, drop=1), Col("p90", True),
                        Col("p99", True, drop=1), Col("max", True), Col("total", True))
    classes = FittedTable("Idle gaps by cause", Col("rank/device"), Col("host_wait\n(CPU late)", True),
                          Col("launch\n(< 30 us)", True), Col("other", True))
    keep = capped([(b.gaps or {}).get("total_us") or 0.0 for b in a.burstiness])
    for b in (a.burstiness[i] for i in keep):
        g = b.gaps or {}
        label = device_text(b.rank, b.device)
        table.add_row(label, "-" if b.util_cv is None else f"{b.util_cv:.2f}",
                      "-" if b.burstiness_B is None else f"{b.burstiness_B:+.2f}",
                      f"{g.get('count', 0):,}", duration(g.get("p50_us")), duration(g.get("p90_us")),
                      duration(g.get("p99_us")), duration(g.get("max_us")), duration(g.get("total_us")))
        cls = g.get("by_class", {})
        classes.add_row(label, *(f"{cls.get(k, {}).get('count', 0):,} gaps, "
                                 f"{duration(cls.get(k, {}).get('total_us', 0.0))}"
                                 for k in ("host_wait", "launch", "other")))
    console.print(table)
    _more(console, len(a.burstiness), len(keep), "devices", "most idle time in gaps")
    console.print(f"utilization in windows of {duration(a.burstiness[0].window_us)}; util CV = std/mean "
                  "of window utilization; B = -1 periodic, 0 random, towards 1 bursty")
    console.print()
    console.print(classes)
    _more(console, len(a.burstiness), len(keep), "devices", "most idle time in gaps")
    _idle_causes(a, console)


TOP_CAUSES = 5  # per device in the terminal; the HTML page lists them all


def _idle_causes(a, console: Console) -> None:
    """Per device, the top causes of its idle time (analysis/gpu/idle.py), the rest summed in one
    row so the shares add up to the device's idle time; the Python column only where a cause has
    a frame (a trace without stacks has none)."""
    devices = [b for b in a.burstiness if b.idle_causes]
    if not devices:
        return
    console.print()
    keep = capped([sum(c["idle_us"] for c in b.idle_causes) for b in devices])
    frames = any(c.get("frame") for i in keep for c in devices[i].idle_causes[:TOP_CAUSES])
    table = FittedTable("Why the GPU idles (what the launching host thread was doing)", Col("rank/device"),
                        Col("host was in", name=True), Col("idle", True), Col("share", True),
                        *([Col("mostly in (Python)", name=True)] if frames else []))
    for b in (devices[i] for i in keep):
        for i, c in enumerate(b.idle_causes[:TOP_CAUSES]):
            cells = [device_text(b.rank, b.device) if i == 0 else "", cause_label(c),
                     duration(c["idle_us"]), f"{100 * c['share']:.1f}%"]
            table.add_row(*cells, *([c.get("frame") or ""] if frames else []))
        rest = b.idle_causes[TOP_CAUSES:]
        if rest:
            cells = ["", f"(the other {len(rest)} causes)", duration(sum(c["idle_us"] for c in rest)),
                     f"{100 * sum(c['share'] for c in rest):.1f}%"]
            table.add_row(*cells, *([""] if frames else []))
    console.print(table)
    _more(console, len(devices), len(keep), "devices", "most idle time")


def _more(console: Console, total: int, shown: int, what: str, by: str) -> None:
    line = more_rows(total, shown, what, by)
    if line:
        console.print(line, highlight=False)


def _phases(a, console: Console, top: int) -> None:
    ph = a.phases
    if ph is None or ph.empty:
        return
    console.print()
    has_syncs = "syncs" in ph
    multi = "ranks" in ph and bool((ph["ranks"] > 1).any())
    gpu = not a.gpu.empty  # a CPU-only trace launches nothing: no column of zeros
    title = ("Phases per rank (the median rank's figures; the slowest rank beside them)" if multi
             else "Phases (annotations and traced iterations)")
    table = FittedTable(title, Col("phase", name=True), *([Col("ranks", True, drop=1)] if multi else []),
                        Col("count", True), Col("CPU time", True),
                        *([Col("slowest\n(rank)", True)] if multi else []),
                        *([Col("GPU time\nlaunched", True)] if gpu else []), Col("syncs", True))
    annotations = ph[ph["kind"] == "annotation"].sort_values("cpu_us", ascending=False).head(top)
    iterations = ph[ph["kind"] == "iteration"]
    for frame in (iterations, annotations):
        for r in frame.itertuples():
            cells = [display_name(r.name)] + ([f"{r.ranks:,}"] if multi else []) \
                + [f"{r.count:,}", duration(r.cpu_us)] \
                + ([f"{duration(r.cpu_max_us)} ({r.max_rank})"] if multi else []) \
                + ([duration(r.gpu_us)] if gpu else []) + [f"{int(r.syncs):,}" if has_syncs else "-"]
            table.add_row(*cells)
    console.print(table)


def _host_ops(a, console: Console, top: int) -> None:
    """The hottest host ops by self time (analysis/host/hottest_ops.py)."""
    ops = a.host_ops
    if ops is None or ops.empty:
        return
    console.print()
    table = FittedTable(f"Top {min(top, len(ops))} of {len(ops)} host ops by self time "
                        f"(host time {duration(ops['self_us'].sum())}, all threads and ranks)",
                        Col("op", name=True), Col("calls", True), Col("self", True), Col("self\nshare", True),
                        Col("total\n(inclusive)", True), Col("total\nshare", True, drop=1))
    for r in ops.head(top).itertuples():
        table.add_row(r.name, f"{r.calls:,}", duration(r.self_us), f"{r.self_pct:.1f}%",
                      duration(r.total_us), f"{r.total_pct:.1f}%")
    console.print(table)


def _memory(a, console: Console) -> None:
    """Memory per device (analysis/memory/usage.py); one line when the trace has no memory events."""
    mem = a.memory
    console.print()
    if mem is None or not mem.recorded:
        console.print("[bold]Memory[/bold]: no memory events in this trace (record with "
                      f"{plain(record_full_advice(a.trace))})", highlight=False)
        return
    table = FittedTable("Memory (profiler memory events)", Col("device", name=True), Col("peak\nallocated", True),
                        Col("peak\nreserved", True), Col("reserved/\nallocated", True),
                        Col("allocations/\niteration", True), Col("growth/\niteration", True),
                        Col("iterations", True, drop=1))
    notes = set()
    for r in mem.devices.itertuples():
        host = r.device_type == 0
        peak = bytes_text(r.peak_allocated) + ("" if r.absolute else " *")
        notes |= {"relative"} if not r.absolute else set()
        notes |= {"host"} if host else set()
        table.add_row(r.label, peak, "n/a (host)" if host else bytes_text(r.peak_reserved),
                      "-" if pd.isna(r.reserved_ratio) else f"{r.reserved_ratio:.2f}x",
                      "-" if pd.isna(r.allocations_per_iteration) else f"{r.allocations_per_iteration:,.0f}",
                      "-" if pd.isna(r.growth_per_iteration) else bytes_text(r.growth_per_iteration, signed=True),
                      f"{r.iterations}")
    console.print(table)
    if "host" in notes:
        console.print("host: tensors torch allocated in host memory (not the process's RSS); the "
                      "host has no caching allocator, so it has no reserved figure")
    if "relative" in notes:
        console.print("* this trace records no Total Allocated: allocated is counted from the "
                      "trace's first event (relative)")
    sites = mem.sites.head(5)
    if len(sites):
        top = FittedTable("Allocations by phase and op (inside iterations)", Col("device"),
                          Col("phase", name=True), Col("op", name=True), Col("per\niteration", True),
                          Col("median\nsize", True), Col("still live\nat end", True))
        for r in sites.itertuples():
            top.add_row(device_key(r.rank, r.device, host=r.device_type == HOST), display_name(r.phase), r.op,
                        f"{r.per_iteration:,.1f}", bytes_text(r.median_bytes), bytes_text(r.live_bytes))
        console.print(top)


def _findings(a, console: Console) -> None:
    console.print()
    if not a.findings:
        console.print("[bold]Findings[/bold]: none of the rules fired")
    else:
        _each_finding(a, console)
    by_reason: dict[str, list[str]] = {}  # one line per reason: a CPU-only trace has nine alike
    for n in a.not_judged:
        by_reason.setdefault(n.reason, []).append(n.rule)
    for reason, rules in by_reason.items():
        console.print(f"[dim]not judged[/dim] {', '.join(rules)}: {plain(reason)}", highlight=False)


def _each_finding(a, console: Console) -> None:
    console.print(f"[bold]Findings[/bold] ({len(a.findings)}, largest estimated saving first)")
    shared = overlap(a.findings)
    if shared is not None:
        console.print(safe_text(f"savings overlap: {shared['note']}", style="yellow"))
    for f in a.findings:
        style = SEVERITY_STYLE.get(f.severity, "")
        console.print(f"[{style}]{f.severity.upper():6s}[/{style}] [bold]{f.rule}[/bold]: {plain(f.title)}")
        console.print(Padding(safe_text(saving_text(f), style="bold" if f.est_saving_us else "dim"),
                              (0, 0, 0, 8)))
        for line in evidence_lines(f.evidence):  # wrapped lines keep the indent
            console.print(Padding(safe_text(line.lstrip()), (0, 0, 0, 8 + len(line) - len(line.lstrip()))))
        console.print(Padding(safe_text(f"fix: {f.fix}"), (0, 0, 0, 8)))
