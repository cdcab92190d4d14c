"""Analyses: pure functions from a loaded `Trace` to result tables, and one facade over them."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ..trace.model import Trace
from .gpu.burstiness import DeviceBurstiness
from .ranks.communication import Communication
from .critical.path import CriticalPath
from .memory.usage import Memory
from .gpu.efficiency import Efficiency
from .rules.base import Finding, NotJudged
from .ranks.stragglers import Ranks
from .host.syncs import SyncSummary
from .timing import Stages


@dataclass
class Analysis:
    """Everything `goodhart-prof analyze` reports, computed once from one trace."""

    trace: Trace
    gpu: pd.DataFrame                 # gpu_time.gpu_time
    kernels: pd.DataFrame             # kernels.kernel_table
    categories: pd.DataFrame          # kernels.category_table
    sync_points: pd.DataFrame         # syncs.sync_points on ranks with a device (one row each)
    syncs: SyncSummary
    burstiness: list[DeviceBurstiness]  # one per (rank, device)
    phases: pd.DataFrame              # phases.phases: per phase, the median rank's row
    # `.item()`/`nonzero`/`if tensor:` on CPU-only ranks: reads that would sync on a GPU
    host_reads: pd.DataFrame = field(default_factory=pd.DataFrame)
    reads: SyncSummary | None = None
    libraries: pd.DataFrame = field(default_factory=pd.DataFrame)  # kernels.library_table
    findings: list[Finding] = field(default_factory=list)
    not_judged: list[NotJudged] = field(default_factory=list)  # rules skipped, with the reason
    communication: Communication | None = None  # comm.communication (None: not computed)
    ranks: Ranks | None = None  # stragglers.rank_tables: ranks side by side (None: not computed)
    memory: Memory | None = None  # memory.memory (None: not computed)
    efficiency: Efficiency | None = None  # efficiency.efficiency (None: not computed)
    phases_by_rank: pd.DataFrame = field(default_factory=pd.DataFrame)  # phases.phases_by_rank
    host_ops: pd.DataFrame = field(default_factory=pd.DataFrame)  # hotops.hot_ops (all ops)
    timing: Stages = field(default_factory=Stages)  # what each analysis cost (timing.py)
    critical_path: CriticalPath | None = None  # critical_path.critical_path (None: not computed)


def analyze(trace: Trace) -> Analysis:
    from . import rules
    from .gpu.burstiness import burstiness
    from .ranks.communication import comm_kernels, communication, has_communication
    from .critical.path import critical_path
    from .gpu.efficiency import efficiency
    from .gpu.device_time import gpu_time
    from .gpu.kernels import category_table, kernel_table, library_table
    from .memory.usage import memory
    from .host.hottest_ops import hot_ops
    from .host.phases import over_ranks, phases_by_rank
    from .ranks.stragglers import empty_ranks, rank_tables
    from .host.syncs import split_host_reads, sync_points, sync_summary

    st = Stages()
    points, reads = st.run("sync_points", lambda: split_host_reads(trace, sync_points(trace)))
    by_rank = st.run("phases", phases_by_rank, trace, points)
    result = Analysis(trace=trace, gpu=st.run("gpu_time", gpu_time, trace),
                      kernels=st.run("kernels", kernel_table, trace),
                      categories=st.run("kernels", category_table, trace), sync_points=points,
                      syncs=st.run("sync_points", sync_summary, points),
                      burstiness=st.run("burstiness", burstiness, trace),
                      phases=st.run("phases", over_ranks, by_rank), phases_by_rank=by_rank, host_reads=reads,
                      reads=st.run("sync_points", sync_summary, reads),
                      libraries=st.run("kernels", library_table, trace), memory=st.run("memory", memory, trace),
                      efficiency=st.run("efficiency", efficiency, trace),
                      host_ops=st.run("host_ops", hot_ops, trace), timing=st)
    result.ranks = st.run("ranks", lambda: rank_tables(trace, comm_kernels(trace)) if has_communication(trace)
                          else empty_ranks("the trace has no communication kernels"))
    result.communication = st.run("communication", communication, trace, result.ranks)
    result.critical_path = st.run("critical_path", critical_path, trace)
    result.findings, result.not_judged = st.run("rules", rules.run, result)
    return result
