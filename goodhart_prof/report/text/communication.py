"""The terminal report's communication and ranks sections (analysis/ranks/communication.py, analysis/ranks/stragglers.py)."""
from __future__ import annotations

import pandas as pd
from rich.console import Console

from ..common import capped, more_rows, percent, plain
from ...tables import Col, FittedTable
from ...units import bytes_text, device_text, duration, ms_text

TOP_SITES = 5
TOP_ITERATIONS = 5


def communication_section(a, console: Console) -> None:
    """Collectives per rank and where they are called from; absent when the trace has no
    communication kernel. (Their overlap with compute is in the ranks section.)"""
    comm = a.communication
    if comm is None or comm.overlap.empty:
        return
    console.print()
    waits = comm.collectives["wait_us"].notna().any()
    extra = (Col("waiting", True, drop=1), Col("busbw once\nall arrived", True)) if waits else ()
    table = FittedTable("Communication (NCCL/RCCL kernels)", Col("rank/device"), Col("collective", name=True),
                        Col("count", True), Col("kernel\ntime", True), Col("bytes", True, drop=2),
                        Col("algbw", True, drop=3), Col("busbw", True), Col("n", True, drop=3), *extra)
    for r in comm.collectives.itertuples():
        cells = (duration(r.wait_us) if pd.notna(r.wait_us) else "-", rate(r.arrived_busbw_gbps)) if waits else ()
        table.add_row(device_text(r.rank, r.device), r.kind, f"{r.count:,}", duration(r.total_us),
                      size(r.bytes, r.sized_count, r.count), rate(r.algbw_gbps), rate(r.busbw_gbps),
                      "-" if pd.isna(r.group_size) else f"{int(r.group_size)}", *cells)
    console.print(table)
    for line in communication_notes(comm.collectives):
        console.print(line, highlight=False)
    if not comm.sites.empty:
        sites = FittedTable("Called from (all ranks)", Col("collective"), Col("count", True),
                            Col("kernel\ntime", True), Col("site", name=True))
        for r in comm.sites.head(TOP_SITES).itertuples():
            sites.add_row(r.kind, f"{r.count:,}", duration(r.total_us), r.site)
        console.print(sites)


def ranks_section(a, console: Console) -> None:
    """Ranks side by side per traced iteration: step, compute, communication, exposed and waiting
    time (means over the iterations; overlapped: the share of communication time a compute
    kernel ran alongside), then who the others waited for in each iteration."""
    ranks = a.ranks
    if ranks is None or ranks.ranks.empty:
        return
    table = ranks.ranks
    stepped = table[table["step_us"].notna()] if table["step_us"].notna().any() else table
    n_it = stepped["iteration"].nunique()
    means = stepped.groupby("rank").agg(step_us=("step_us", "mean"), compute_us=("compute_us", "mean"),
                                        comm_us=("comm_us", "mean"), exposed_us=("exposed_us", "mean"),
                                        wait_us=("wait_us", "mean"), last_count=("last_count", "sum"))
    console.print()
    title = (f"Ranks (mean per traced iteration, {n_it} iteration{'s' if n_it != 1 else ''})"
             if table["step_us"].notna().any() else "Ranks (whole trace: no ProfilerStep#N)")
    out = FittedTable(title, Col("rank", True), Col("step", True), Col("compute", True), Col("communi-\ncation", True),
                      Col("over-\nlapped", True, drop=1), Col("exposed", True), Col("waiting", True),
                      Col("arrived\nlast", True))
    judged = ranks.reason is None
    keep = capped(means["step_us"].fillna(means["compute_us"] + means["comm_us"]).to_numpy(float))
    for rank, r in means.iloc[keep].iterrows():
        overlapped = 1 - r.exposed_us / r.comm_us if r.comm_us > 0 else None
        out.add_row(str(rank), duration(r.step_us), duration(r.compute_us), duration(r.comm_us),
                    percent(overlapped), duration(r.exposed_us), duration(r.wait_us) if judged else "-",
                    f"{int(r.last_count):,}" if judged else "-")
    console.print(out)
    line = more_rows(len(means), len(keep), "ranks", "longest steps")
    if line:
        console.print(line, highlight=False)
    if not judged:
        console.print(f"arrivals at collectives: not judged: {plain(ranks.reason)}", highlight=False)
        return
    if ranks.offsets_us:
        offsets = list(ranks.offsets_us.items())
        kept = [offsets[i] for i in capped([abs(v) for _, v in offsets])]
        shown = ", ".join(f"rank {k} {ms_text(v, '+.3f')}" for k, v in kept)
        more = (f" (and {len(offsets) - len(kept):,} more ranks; the {len(kept)} largest are shown)"
                if len(kept) < len(offsets) else "")
        console.print(f"clock offsets removed (aligned on collective ends): {shown}{more}", highlight=False)
    worst = ranks.iterations.sort_values("caused_wait_us", ascending=False).head(TOP_ITERATIONS)
    for r in worst.sort_values("iteration").itertuples():
        label = f"iteration {r.iteration}" if r.iteration >= 0 else "whole trace"
        console.print(
            f"{label}: rank {r.slowest_rank} arrived last at {r.last_count} of {r.collectives} "
            f"collectives; the others waited {duration(r.caused_wait_us)} for it (worst: "
            f"{r.worst_kind} #{r.worst_seq}, {duration(r.worst_wait_us)}); compute imbalance "
            f"{r.compute_imbalance:.2f}x", highlight=False)
    if ranks.unmatched:
        console.print(f"{ranks.unmatched:,} communication kernels were not matched across ranks "
                      f"(their group ran a different number of times on each rank)", highlight=False)


def communication_notes(collectives: pd.DataFrame) -> list[str]:
    """Where the sizes and group sizes came from, and what the bandwidths mean, in a few lines."""
    if collectives.empty:
        return []
    notes = []
    sources = set("+".join(str(x) for x in collectives["size_source"].dropna()).split("+")) - {""}
    if not sources:
        notes.append("message sizes: not recorded in this trace (no bytes, no bandwidth)")
    elif "shapes" in sources:
        notes.append("message sizes: from the shapes the c10d ops and nccl:* annotations record "
                     "(Input Dims x Input type; this c10d records no message size)")
    groups = set("+".join(str(x) for x in collectives["group_source"].dropna()).split("+")) - {""}
    if "all ranks" in groups:
        notes.append("n (group size): not recorded; the job's world size, since every rank of the "
                     "job ran these collectives together (matched across ranks, ending together)")
    elif sources and collectives["group_size"].isna().any():
        notes.append("n (group size): not recorded, so no busbw where it is blank (never guessed)")
    if collectives["wait_us"].notna().any():
        notes.append("busbw counts each kernel's whole time, waiting for late ranks included; "
                     "'busbw once all arrived' counts only the time after the last rank arrived")
    return notes


def size(nbytes: float, sized: int, count: int) -> str:
    if not sized or pd.isna(nbytes):
        return "-"
    text = bytes_text(nbytes)
    return text if sized == count else f"{text} ({sized} of {count})"


def rate(gbps: float) -> str:
    return "-" if gbps is None or pd.isna(gbps) else f"{gbps:,.2f} GB/s"
