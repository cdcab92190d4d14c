"""`Analysis`: everything `goodhart-prof analyze` reports about one trace, the result the facade
(facade.py `analyze`) builds and the rules and reports read."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ..trace.model import Trace
from .gpu.burstiness import DeviceBurstiness
from .ranks.communication import Communication
from .critical.path import CriticalPath
from .gpu.kernel_sequences import KernelSequences
from .gpu.cupti import CuptiCounters
from .gpu.dynamo import CompileUse
from .memory.usage import Memory
from .gpu.efficiency import Efficiency
from .rules.finding import Finding, NotJudged
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
    kernel_sequences: KernelSequences | None = None  # kernel_sequences.kernel_sequences (None: not computed)
    compile: CompileUse | None = None  # gpu/dynamo.compile_use (None: no torch.compile in the trace)
    cupti: CuptiCounters | None = None  # gpu/cupti.cupti_counters (None: no CUPTI counters)
