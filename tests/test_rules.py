"""Rules as declared units: needs, thresholds with reasons, and the runner's record of skips."""
from __future__ import annotations

from pathlib import Path

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules import BY_ID, RULES, ZOO_RULES, Need
from goodhart_prof.trace.load import load
from test_syncs import ann, kernel, load_events, op, rt

DATA = Path(__file__).parent / "data"
RULES_DIR = Path(__file__).resolve().parents[1] / "goodhart_prof" / "analysis" / "rules"


def test_every_rule_is_declared_with_reasons():
    assert len(BY_ID) == len(RULES) == 13
    assert set(ZOO_RULES) <= set(BY_ID)
    families = {r.family for r in RULES}
    assert families == {"syncs", "copies", "precision", "compile", "utilization", "dominance"}
    for rule in RULES:
        assert rule.thresholds, rule.id
        for name, threshold in rule.thresholds.items():
            assert len(threshold.reason.split()) >= 5, (rule.id, name)


def test_rule_files_stay_small():
    for path in RULES_DIR.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 250, path.name


def test_a_cpu_only_trace_skips_the_gpu_rules_and_says_why(tmp_path):
    events = [ann("ProfilerStep#1", 0, 5000), op("aten::mm", 100, 300)]
    a = analyze(load_events(tmp_path, events))
    skipped = {n.rule: n.reason for n in a.not_judged}
    gpu_rules = {r.id for r in RULES if Need.GPU in r.needs}
    assert gpu_rules == {"unfused_adam", "no_amp", "tiny_batch", "low_utilization",
                         "dominant_scatter_gather", "eager_update", "dominant_kernel"}
    assert set(skipped) == gpu_rules
    assert all("no GPU activity" in reason for reason in skipped.values())
    assert a.findings == []


def test_a_gpu_only_trace_skips_the_host_rules(tmp_path):
    events = [kernel("elementwise_kernel", 100 + 50 * i, 20, i) for i in range(10)]
    a = analyze(load_events(tmp_path, events))
    skipped = {n.rule: n.reason for n in a.not_judged}
    assert {"item_logging", "sync_grad_clip", "nan_checks", "branchy_value_head",
            "unfused_adam"} <= set(skipped)
    assert "no host ops" in skipped["item_logging"]
    assert skipped["eager_update"].startswith("the trace has no backward pass")
    assert {"pageable_htod", "cpu_alloc", "no_amp", "tiny_batch"}.isdisjoint(skipped)


def test_a_training_trace_is_judged_by_every_rule():
    a = analyze(load(DATA / "hta" / "v100_ddp_rank1.json.gz", progress=False))
    assert a.not_judged == []
    assert {f.rule for f in a.findings} >= {"unfused_adam"}


def test_launch_rt_helper_still_links(tmp_path):
    # a launch call inside an op with its kernel: judged as GPU work with host ops
    events = [ann("ProfilerStep#1", 0, 5000), op("aten::add", 100, 50), rt("cudaLaunchKernel", 110, 10, 1),
              kernel("elementwise_kernel", 130, 5, 1)]
    a = analyze(load_events(tmp_path, events))
    assert {n.rule for n in a.not_judged} == {"eager_update"}
