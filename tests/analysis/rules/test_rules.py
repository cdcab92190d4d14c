"""Rules as declared units: needs, thresholds with reasons, and the runner's record of skips."""
from __future__ import annotations


from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules import BY_ID, RULES, ZOO_RULES, Need
from goodhart_prof.trace.load import load
from tests.support.events import X, ann, cuda_item, kernel, load_events, op, rt
from tests.support.paths import DATA, ROOT

RULES_DIR = ROOT / "goodhart_prof" / "analysis" / "rules"


def test_every_rule_is_declared_with_reasons():
    assert len(BY_ID) == len(RULES) == 22
    assert set(ZOO_RULES) <= set(BY_ID)
    families = {r.family for r in RULES}
    assert families == {"syncs", "copies", "precision", "compile", "utilization", "dominance", "ranks",
                        "memory", "coverage", "host"}
    for rule in RULES:
        assert rule.thresholds, rule.id
        for name, threshold in rule.thresholds.items():
            assert len(threshold.reason.split()) >= 5, (rule.id, name)
        # every rule declares its saving: what it counts and why, or why it makes none
        assert len(rule.saving.reason.split()) >= 5, rule.id
        assert rule.saving.counts is None or len(rule.saving.counts.split()) >= 3, rule.id
    unestimated = {r.id for r in RULES if r.saving.counts is None}
    assert unestimated == {"dominant_scatter_gather", "eager_update", "allocator_waste",
                           "memory_growth", "no_python_stacks", "graph_break"}


def test_rule_files_stay_small():
    for path in RULES_DIR.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 250, path.name


def test_a_cpu_only_trace_skips_the_gpu_rules_and_says_why(tmp_path):
    events = [ann("ProfilerStep#1", 0, 5000), op("aten::mm", 100, 300)]
    a = analyze(load_events(tmp_path, events))
    skipped = {n.rule: n.reason for n in a.not_judged}
    gpu_rules = {r.id for r in RULES if Need.GPU in r.needs}
    assert gpu_rules == {"unfused_adam", "no_amp", "tiny_batch", "low_utilization",
                         "dominant_scatter_gather", "eager_update", "dominant_kernel",
                         "straggler_rank", "exposed_communication"}
    training = {"sync_grad_clip", "branchy_value_head"}  # advice about an update: training only
    memory = {r.id for r in RULES if Need.MEMORY in r.needs}
    assert memory == {"allocator_waste", "memory_growth", "alloc_churn"}
    # slow_tiny_ops: no input dims (aten::mm without record_shapes) and no memory events to size it
    assert set(skipped) == gpu_rules | training | memory | {"slow_tiny_ops"}
    assert "record_shapes" in skipped["slow_tiny_ops"]
    assert all("no memory events" in skipped[r] for r in memory)
    assert all("no GPU activity" in skipped[r] for r in gpu_rules - {"unfused_adam", "eager_update"})
    assert all("no backward pass" in skipped[r] for r in training)
    assert a.findings == []


def test_a_gpu_only_trace_skips_the_host_rules(tmp_path):
    events = [kernel("elementwise_kernel", 100 + 50 * i, 20, i) for i in range(10)]
    a = analyze(load_events(tmp_path, events))
    skipped = {n.rule: n.reason for n in a.not_judged}
    assert {"item_logging", "sync_grad_clip", "nan_checks", "branchy_value_head",
            "unfused_adam"} <= set(skipped)
    assert "no host ops" in skipped["item_logging"]
    # compilation cannot be judged without the host side (the issue: eager_update fired here)
    assert "no host ops" in skipped["eager_update"]
    assert {"pageable_htod", "no_amp", "tiny_batch"}.isdisjoint(skipped)
    assert "no ProfilerStep" in skipped["cpu_alloc"]  # a rate per iteration


def test_a_training_trace_is_judged_by_every_rule():
    a = analyze(load(DATA / "hta" / "v100_ddp_rank1.json.gz", progress=False))
    # one rank of a DDP job: every rule is judged but the one comparing ranks, which says why
    assert [n.rule for n in a.not_judged] == ["straggler_rank"]
    assert a.not_judged[0].reason.startswith("one rank traced")
    assert {f.rule for f in a.findings} >= {"unfused_adam", "exposed_communication"}


def test_launch_rt_helper_still_links(tmp_path):
    # a launch call inside an op with its kernel: judged as GPU work with host ops
    events = [ann("ProfilerStep#1", 0, 5000), op("aten::add", 100, 50), rt("cudaLaunchKernel", 110, 10, 1),
              kernel("elementwise_kernel", 130, 5, 1)]
    a = analyze(load_events(tmp_path, events))
    assert {n.rule for n in a.not_judged} == {"eager_update", "unfused_adam", "sync_grad_clip",
                                              "branchy_value_head",  # inference: no backward
                                              "straggler_rank", "exposed_communication",  # no NCCL
                                              "allocator_waste", "memory_growth", "alloc_churn"}  # no memory events


def test_event_query_polls_and_is_never_a_sync(tmp_path):
    # Kineto can attach an "Event Sync" record to a polling cudaEventQuery: not a wait.
    events = [ann("ProfilerStep#1", 0, 5000), kernel("k", 10, 5, 1), rt("cudaLaunchKernel", 5, 3, 1),
              rt("cudaEventQuery", 100, 2, 9),
              X("Event Sync", "cuda_sync", 100, 2, pid=0, tid=7, device=0, stream=7, correlation=9),
              rt("cudaEventSynchronize", 200, 40, 10)]
    a = analyze(load_events(tmp_path, events))
    assert a.syncs.by_kind["event_sync"] == 1 and a.syncs.total == 1
    assert a.sync_points.iloc[0]["site"] == "cudaEventSynchronize"


def test_cpu_only_reads_are_host_reads_not_sync_points(tmp_path, capsys):
    from goodhart_prof.cli import main
    events = [ann("ProfilerStep#1", 0, 5000)]
    for k in range(3):
        events += [op("aten::item", 100 + 1000 * k, 20), op("aten::_local_scalar_dense", 101 + 1000 * k, 18)]
    path = tmp_path / "cpu.json"
    path.write_text(__import__("json").dumps({"traceEvents": events}))
    a = analyze(load(path, progress=False))
    assert a.syncs.total == 0 and a.reads.total == 3 and a.reads.by_kind["item"] == 3
    found = {f.rule: f for f in a.findings}
    assert "CPU-only trace" in found["item_logging"].title
    try:
        main(["analyze", str(path)])
    except SystemExit as exc:
        assert exc.code in (0, None)
    out = " ".join(capsys.readouterr().out.split())  # the note wraps at the width
    assert "Host reads on CPU-only rank(s): 3 (item 3)" in out and "would be a sync point" in out
    assert "Sync points" not in out
    try:
        main(["analyze", "--json", str(path)])
    except SystemExit as exc:
        assert exc.code in (0, None)
    doc = __import__("json").loads(capsys.readouterr().out)
    assert doc["sync_points"]["total"] == 0 and doc["host_reads"]["total"] == 3
    assert {"rule": "no_amp", "reason": "the trace has no GPU activity (a CPU-only trace)"} in doc["not_judged"]


def test_item_advice_follows_the_site(tmp_path):
    def trace_with(annotation: str, name: str):
        events = [ann("ProfilerStep#1", 0, 9000), ann(annotation, 50, 8000)]
        for k in range(3):
            events += cuda_item(100 + 1000 * k, 10 * k + 1)
        return analyze(load_events(tmp_path, events, name))
    logging = {f.rule: f for f in trace_with("log_metrics", "a.json").findings}["item_logging"]
    assert "logging thread" in logging.fix and "log_metrics" in logging.title
    needed = {f.rule: f for f in trace_with("## sparse_data_dist ##", "b.json").findings}["item_logging"]
    assert "logging" not in needed.fix and "split sizes" in needed.fix
    assert "## sparse_data_dist ##" in needed.title
