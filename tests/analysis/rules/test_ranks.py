"""Rank rules (analysis/rules/ranks.py): communication the step cannot hide (exposed_communication),
on a hand-made rank whose figures are worked by hand and on the V100 DDP trace (counted from its raw
JSON), with advice that follows the evidence. straggler_rank on the 8-rank DLRM trace is in
tests/analysis/ranks/test_stragglers.py, beside the rank tables it reads."""
from __future__ import annotations

import gzip
import json

from goodhart_prof.analysis import analyze
from goodhart_prof.trace.load import load
from tests.support.events import ann, kernel, load_events, op, rt
from tests.support.paths import DATA

V100 = DATA / "hta" / "v100_ddp_rank1.json.gz"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def one_rank(tmp_path, nccl_us, name="t.json"):
    """Two 9 ms steps, each a 3 ms GEMM, then an all_reduce of `nccl_us` launched by
    c10d::allreduce_ after the GEMM has ended (nothing overlaps it)."""
    events = []
    for it in range(2):
        b = 10_000 * it
        events += [ann(f"ProfilerStep#{it}", b, 9_000),
                   op("aten::mm", b + 10, 20), rt("cudaLaunchKernel", b + 15, 5, 10 * it + 1),
                   kernel("gemm", b + 100, 3000, 10 * it + 1),
                   op("c10d::allreduce_", b + 3200, 30), rt("cudaLaunchKernel", b + 3210, 5, 10 * it + 2),
                   kernel(NCCL, b + 3300, nccl_us, 10 * it + 2)]
    return {f.rule: f for f in analyze(load_events(tmp_path, events, name)).findings}


def test_an_all_reduce_no_compute_overlaps(tmp_path):
    f = one_rank(tmp_path, 2000)["exposed_communication"]
    ev = f.evidence
    # 2 ms of the 9 ms step, none of it under the GEMM (100..3100 then 3300..5300)
    assert (ev["exposed_us_per_iteration"], ev["step_us"], ev["share_of_step"]) == (2000.0, 9000.0, 0.2222)
    assert (ev["overlap"], ev["of_which_waiting_us"], ev["top_kind_per_iteration"]) == (0.0, 0.0, 1.0)
    assert ev["collectives"] == "all_reduce 2x 4.00 ms" and ev["called_from"] == "c10d::allreduce_"
    assert f.est_saving_us == 2000.0
    assert f.title.startswith("communication the step cannot hide: 2.00 ms per iteration on rank 0 (22% of its step)")
    assert f.title.endswith("one rank traced, so part of it may be waiting for slower ranks")
    assert f.fix.startswith("No compute runs during the all_reduces (called from c10d::allreduce_)")
    assert "bucket them" not in f.fix  # one per iteration is not latency-bound


def test_a_small_share_of_the_step_is_not_exposed(tmp_path):
    # 1 ms of a 9 ms step: 11%, under the 15% the rule fires at
    assert "exposed_communication" not in one_rank(tmp_path, 1000)


def test_exposed_communication_names_where_it_is_called_from():
    a = analyze(load(V100, progress=False))
    (f,) = [f for f in a.findings if f.rule == "exposed_communication"]
    with gzip.open(V100, "rt") as fh:
        raw = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    nccl = [e for e in raw if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel")]
    steps = [e for e in raw if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert f.evidence["top_kind_per_iteration"] == len(nccl) / len(steps) == 404
    assert f.evidence["overlap"] == 0.0
    assert "CompiledFunctionBackward > c10d::allreduce_" in f.evidence["called_from"]
    assert "No compute runs during the all_reduces" in f.fix and "bucket them" in f.fix
    assert "one rank traced" in f.title
