"""The terminal report's efficiency section (analysis/gpu/efficiency.py): which device each rate is
measured against (each kind of device once), the roofline by op type (summed over the devices of
one model when there are several) and the top compute kernels."""
from __future__ import annotations

import pandas as pd
from rich.console import Console

from ...analysis.gpu.device_time import unrecorded_gpu
from ...analysis.gpu.efficiency import across_devices, device_kinds
from ...units import devices_text, duration
from ..common import kernel_name, number, plain
from ...tables import Col, FittedTable


def efficiency_section(a, console: Console, top: int) -> None:
    """The roofline table (analysis/gpu/efficiency.py): per op type, then the top compute kernels."""
    eff = a.efficiency
    if eff is None or (eff.ops.empty and not eff.unsized):
        if eff is not None and not len(eff.instances) and unrecorded_gpu(a.trace) and a.gpu.empty:
            console.print()
            console.print("[bold]Efficiency against the hardware[/bold]: no rates: the ops ran on a "
                          "GPU whose activity was not recorded (their host time is dispatch, not "
                          "compute)", highlight=False)
        return
    console.print()
    console.print("[bold]Efficiency against the hardware[/bold] (GEMM, conv, attention ops with shapes)")
    for line in _device_lines(eff.devices):
        console.print(line, highlight=False)
    across = across_devices(eff)
    if not across.empty:
        console.print(_across_table(across, top))
    elif not eff.ops.empty:
        console.print(_roofline_table("by op type", eff.ops, "op", top))
    if not eff.kernels.empty:
        console.print(_roofline_table(f"top {min(top, len(eff.kernels))} compute kernels", eff.kernels,
                                      "name", top))
    if eff.unsized:
        console.print("FLOPs unknown (shapes or scalar arguments not recorded): "
                      + ", ".join(f"{op} x{n:,}" for op, n in eff.unsized.items()), highlight=False)


def _device_lines(devices: pd.DataFrame) -> list[str]:
    """One line per kind of device (efficiency.device_kinds): eight ranks of one GPU model are one
    line, not eight."""
    lines = []
    for d, where in device_kinds(devices):
        if d.device < 0:
            ranks = ", ".join(str(r) for r, _ in where)
            lines.append(f"  rank{'s' if len(where) > 1 else ''} {ranks}: the CPU (no kernels: each op's own CPU "
                         "time); peak unknown, no percentages")
            continue
        peak = f"peak {d.peak_name} ({d.source})" if d.peak_name else "peak unknown: no percentages"
        lines.append(f"  {devices_text(where)}: {plain(d.device_name or 'unnamed device')}; {peak}")
    return lines


def _across_table(across: pd.DataFrame, top: int):
    """The roofline by op type summed over the devices of each model: rates of the sums, and the
    devices' own TFLOP/s as a range where they differ."""
    counts = sorted(set(across["devices"].tolist()))
    over = f"{counts[0]} devices" if len(counts) == 1 else "their devices"
    table = FittedTable(f"Roofline, by op type, summed over {over} (TFLOP/s: the sum's, and each device's range)",
                        Col("aten op", name=True), Col("dtype"), *(() if len(counts) == 1 else (Col("devices", True),)),
                        Col("count", True, drop=3), Col("time", True), Col("FLOP/B", True, drop=2),
                        Col("TFLOP/s", True), Col("GB/s", True, drop=2), Col("% peak", True),
                        Col("% roof", True, drop=1), Col("bound"))
    for r in across.head(top).itertuples():
        low, high = number(r.tflops_low, 2), number(r.tflops_high, 2)
        rate = number(r.tflops, 2) + (f" ({low}-{high})" if low != high else "")
        table.add_row(str(r.op).removeprefix("aten::"), r.dtype,
                      *(() if len(counts) == 1 else (f"{r.devices:,}",)), f"{r.count:,}", duration(r.time_us),
                      number(r.intensity, 1), rate, number(r.gbps, 1), number(r.pct_peak, 1), number(r.pct_roof, 1),
                      r.bound or "-")
    return table


def _roofline_table(title: str, frame: pd.DataFrame, label: str, top: int):
    """Op rows show dtype and count; kernel rows give that room to the kernel's name. A narrow
    console leaves out GFLOP and GB first (FLOP/B and the rates say it), then the count, GB/s and
    FLOP/B, then % of roof, to keep names legible."""
    is_op = label == "op"
    extra = (Col("dtype"), Col("count", True, drop=3)) if is_op else ()
    table = FittedTable(f"Roofline, {title}", Col("rank/dev"), Col("aten op" if is_op else "kernel", name=True),
                        *extra, Col("time", True), Col("GFLOP", True, drop=4), Col("GB", True, drop=4),
                        Col("FLOP/B", True, drop=2), Col("TFLOP/s", True), Col("GB/s", True, drop=2),
                        Col("% of\npeak", True), Col("% of\nroof", True, drop=1), Col("bound"))
    for r in frame.head(top).itertuples():
        where = "cpu" if r.device < 0 else f"{r.rank}/{r.device}"
        cells = (r.dtype, f"{r.count:,}") if is_op else ()
        name = str(getattr(r, label))
        shown = name.removeprefix("aten::") if is_op else kernel_name(name)
        table.add_row(where, shown, *cells, duration(r.time_us), f"{r.flops / 1e9:,.2f}", number(r.bytes / 1e9, 3),
                      number(r.intensity, 1), number(r.tflops, 2),
                      number(r.gbps, 1), number(r.pct_peak, 1), number(r.pct_roof, 1), r.bound or "-")
    return table

