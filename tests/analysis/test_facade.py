"""`analyze` (goodhart_prof/analysis/facade.py): every analysis run once and timed under its stage
name, in the order the facade runs them, then the rules; what it finds on a real trace agrees with
the trace's own events."""
from __future__ import annotations

import gzip
import json

from goodhart_prof.analysis import analyze
from goodhart_prof.trace.load import load
from goodhart_prof.trace.model import GPU_ACTIVITY_CATS
from tests.support.paths import DATA

MI250 = DATA / "hta" / "mi250_minitoy_rocm.json.gz"
STAGES = ["sync_points", "phases", "gpu_time", "kernels", "burstiness", "memory", "efficiency",
          "host_ops", "ranks", "communication", "critical_path", "kernel_sequences", "compile", "cupti",
          "rules"]


def test_every_stage_is_timed_once_in_order():
    a = analyze(load(MI250, progress=False))
    assert list(a.timing.seconds) == STAGES
    assert all(s >= 0 for s in a.timing.seconds.values())
    assert abs(a.timing.total - sum(a.timing.seconds.values())) < 1e-12


def test_the_kernel_table_counts_the_traces_gpu_activity():
    with gzip.open(MI250, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_ACTIVITY_CATS]
    a = analyze(load(MI250, progress=False))
    assert int(a.kernels["count"].sum()) == len(kernels)
    assert abs(float(a.kernels["total_us"].sum()) - sum(e["dur"] for e in kernels)) < 1e-6 * len(kernels)


def test_a_trace_without_communication_says_so():
    a = analyze(load(MI250, progress=False))
    assert a.ranks.reason == "the trace has no communication kernels"
    skipped = {n.rule: n.reason for n in a.not_judged}
    assert skipped["straggler_rank"] == skipped["exposed_communication"] == \
        "the trace has no communication kernels (NCCL/RCCL)"
    assert skipped["memory_growth"].startswith("the trace has no memory events")
