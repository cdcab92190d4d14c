"""The terminal report's efficiency section (analysis/gpu/efficiency.py): which device each rate is
measured against (each kind of device once), the roofline by op type (summed over the devices of
one model when there are several) and the top compute kernels."""
from __future__ import annotations

import pandas as pd
from rich.console import Console

from ...analysis.gpu.device_time import unrecorded_gpu
from ...analysis.gpu.efficiency import across_devices, device_kinds
from ...units import devices_text, duration
from ..common import kernel_name, make_table, number, one_line, plain, short


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
        console.print(_roofline_table("by op type", eff.ops, "op", top, console.width))
    if not eff.kernels.empty:
        console.print(_roofline_table(f"top {min(top, len(eff.kernels))} compute kernels", eff.kernels,
                                      "name", top, console.width))
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
    table = make_table(f"Roofline, by op type, summed over {over} (TFLOP/s: the sum's, and each device's range)",
                       "aten op", "dtype", *(() if len(counts) == 1 else ("devices",)), "count", "time", "FLOP/B",
                       "TFLOP/s", "GB/s", "% peak", "% roof", "bound")
    for r in across.head(top).itertuples():
        low, high = number(r.tflops_low, 2), number(r.tflops_high, 2)
        rate = number(r.tflops, 2) + (f" ({low}-{high})" if low != high else "")
        table.add_row(one_line(short(str(r.op).removeprefix("aten::"), 36)), r.dtype,
                      *(() if len(counts) == 1 else (f"{r.devices:,}",)), f"{r.count:,}", duration(r.time_us),
                      number(r.intensity, 1), rate, number(r.gbps, 1), number(r.pct_peak, 1), number(r.pct_roof, 1),
                      r.bound or "-")
    for column in table.columns[2:-1]:
        column.justify = "right"
    return table


def _roofline_table(title: str, frame: pd.DataFrame, label: str, top: int, width: int = 160):
    """Op rows show dtype and count; kernel rows give that room to the kernel's name. A console
    under 140 columns leaves out GFLOP and GB (FLOP/B and the rates say it) to keep names legible."""
    is_op = label == "op"
    wide = width >= 140
    extra = ("dtype", "count") if is_op else ()
    sizes = ("GFLOP", "GB") if wide else ()
    columns = ("rank/dev", "aten op" if is_op else "kernel", *extra, "time", *sizes, "FLOP/B",
               "TFLOP/s", "GB/s", "% of peak", "% of roof", "bound")
    table = make_table(f"Roofline, {title}", *columns, right=tuple(range(2, len(columns) - 1)))
    for r in frame.head(top).itertuples():
        where = "cpu" if r.device < 0 else f"{r.rank}/{r.device}"
        cells = (r.dtype, f"{r.count:,}") if is_op else ()
        size_cells = (f"{r.flops / 1e9:,.2f}", number(r.bytes / 1e9, 3)) if wide else ()
        name = str(getattr(r, label))
        shown = short(name.removeprefix("aten::"), 36) if is_op else kernel_name(name, 40)
        table.add_row(where, one_line(shown), *cells, duration(r.time_us), *size_cells,
                      number(r.intensity, 1), number(r.tflops, 2),
                      number(r.gbps, 1), number(r.pct_peak, 1), number(r.pct_roof, 1), r.bound or "-")
    return table

