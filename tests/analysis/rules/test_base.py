"""What a rule is (analysis/rules/base.py): thresholds and savings a rule declares, the shared
evidence of one run (`Context`: iterations, the sync points outside setup), and the helpers the
rules word their evidence with (logging sites, top sites, host-only points)."""
from __future__ import annotations

import pandas as pd
import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules.base import Context, Rule, Threshold, is_logging_site, on_host_only, top_sites
from goodhart_prof.analysis.rules.savings import Saving
from tests.support.events import ann, cuda_item, launch, load_events, op


def test_a_rule_declares_its_limits_and_saving():
    rule = Rule("r", "fam", lambda ctx: None, thresholds={"rate": Threshold(2.0, "why")},
                saving=Saving("the host time", "because"))
    assert rule.limit("rate") == 2.0
    with pytest.raises(KeyError):
        rule.limit("other")
    assert rule.estimated(12.5) == {"est_saving_us": 12.5, "saving_note": "the host time"}
    assert rule.estimated(None) == {"est_saving_us": None, "saving_note": "because"}
    assert rule.estimated(None, "no copy") == {"est_saving_us": None, "saving_note": "no copy"}
    assert rule.unestimated() == {"est_saving_us": None, "saving_note": "because"}


def test_logging_sites():
    for site in ("log_metrics > aten::item", "trainer/logger.py:72 submit", "wandb", "print_stats",
                 "train.py:3 log", "tensorboard", "summary"):
        assert is_logging_site(site), site
    for site in ("aten::logsumexp", "policy.py:9 logits", "rollout > aten::item", "catalog"):
        assert not is_logging_site(site), site


def test_top_sites_by_count_then_host_time():
    points = pd.DataFrame({"site": ["a", "b", "b", "c", "c", "d"], "kind": ["item"] * 6,
                           "dur": [500.0, 1.0, 2.0, 10.0, 20.5, 7.0]})
    assert top_sites(points, n=3) == [{"site": "c", "count": 2, "total_us": 30.5},
                                      {"site": "b", "count": 2, "total_us": 3.0},
                                      {"site": "a", "count": 1, "total_us": 500.0}]
    assert top_sites(points.iloc[:0]) == []


def test_context_counts_iterations_and_leaves_setup_out(tmp_path):
    # an .item() before the first step (setup) and one in each of three steps
    events = [*cuda_item(100, 1)]
    for it in range(3):
        events += [ann(f"ProfilerStep#{it}", 1000 * (it + 1), 900), *cuda_item(1000 * (it + 1) + 100, 10 * (it + 1))]
    ctx = Context(analyze(load_events(tmp_path, events)))
    assert ctx.iterations == 3
    assert ctx.points["ts"].tolist() == [1100.0, 2100.0, 3100.0]
    assert ctx.of_kind("item")["ts"].tolist() == [1100.0, 2100.0, 3100.0]
    assert ctx.of_kind("nonzero").empty
    assert not on_host_only(ctx, ctx.points)  # the reads ran on a GPU rank
    assert Context(analyze(load_events(tmp_path, [op("aten::add", 0, 5)], "none.json"))).iterations == 1


def test_host_reads_on_a_cpu_only_trace_are_host_only(tmp_path):
    events = [ann("ProfilerStep#1", 0, 1000), op("aten::item", 100, 20), op("aten::_local_scalar_dense", 101, 18)]
    ctx = Context(analyze(load_events(tmp_path, events)))
    assert len(ctx.points) == 1 and on_host_only(ctx, ctx.points)
    assert not on_host_only(ctx, ctx.points.iloc[:0])
    # with GPU work on rank 0 (its device_ranks), the same points are no longer host-only
    gpu = Context(analyze(load_events(tmp_path, events + launch("k", 500, 1), "gpu.json")))
    assert gpu.device_ranks == {0} and not on_host_only(gpu, ctx.points)
