"""`analyze`: the facade over the analyses, one trace in, one `Analysis` out (result.py): each
analysis run and timed (timing.py), then the rules over their results (rules/)."""
from __future__ import annotations

from ..trace.model import Trace
from . import rules
from .critical.path import critical_path
from .gpu.cupti import cupti_counters
from .gpu.dynamo import compile_use
from .gpu.burstiness import burstiness
from .gpu.device_time import gpu_time
from .gpu.efficiency import efficiency
from .gpu.kernel_sequences import kernel_sequences
from .gpu.kernels import category_table, kernel_table, library_table
from .host.hottest_ops import hot_ops
from .host.phases import over_ranks, phases_by_rank
from .host.syncs import split_host_reads, sync_points, sync_summary
from .memory.usage import memory
from .ranks.comm_kernels import comm_kernels, has_communication
from .ranks.communication import communication
from .ranks.stragglers import empty_ranks, rank_tables
from .result import Analysis
from .timing import Stages


def analyze(trace: Trace) -> Analysis:
    """Every analysis of the trace, then the rules' findings over them."""
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
    result.kernel_sequences = st.run("kernel_sequences", kernel_sequences, trace)
    result.compile = st.run("compile", compile_use, trace)
    result.cupti = st.run("cupti", cupti_counters, trace)
    result.findings, result.not_judged = st.run("rules", rules.run, result)
    return result
