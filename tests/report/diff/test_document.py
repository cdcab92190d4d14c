"""report/diff/document.py: the `goodhart-prof/diff/v1` JSON document. Each side's files and ranks,
the iterations counted, the spread rows with their verdicts, tables as records with null (never
NaN) for undefined ratios, and `top` limiting the long lists."""
from __future__ import annotations

import json

from goodhart_prof.report.diff.document import SCHEMA, to_document
from tests.support.diffs import AB, ab_comparison, phase_pair


def test_hand_made_pair_as_plain_json(tmp_path):
    """Five steps a side (1000, 1010, 990, 1005, 995 us), the first a warm-up; each step holds a
    200 us `rollout`, and B also a 200 us `logging`."""
    doc = to_document(phase_pair(tmp_path))
    json.dumps(doc, allow_nan=False)  # plain JSON: no NaN anywhere
    assert doc["schema"] == SCHEMA == "goodhart-prof/diff/v1"
    assert doc["a"] == {"paths": [str(tmp_path / "a.json")], "ranks": [0], "devices": []}
    assert doc["iterations"]["a"] == {"counted": [1, 2, 3, 4], "warmup": [0], "throughput": [],
                                      "profiler_cost": None}
    spread = {r["item"]: r for r in doc["spread"]}
    # counted steps 1010, 990, 1005, 995: median 1000, interval their range
    assert (spread["iteration time"]["a"], spread["iteration time"]["low_a"],
            spread["iteration time"]["high_a"]) == (1000.0, 990.0, 1010.0)
    assert spread["logging"]["verdict"] == "only in B" and spread["logging"]["ratio"] is None
    assert spread["logging"]["impact_us"] == 800.0  # 200 us in each of 4 counted iterations
    assert doc["within_noise"] == [{"kind": "iteration", "item": "iteration time"},
                                   {"kind": "phase", "item": "rollout"}]
    phases = {r["name"]: r for r in doc["phases"]}
    assert (phases["logging"]["presence"], phases["logging"]["cpu_us_b"], phases["logging"]["count_b"]) == \
        ("b_only", 1000.0, 5)
    assert phases["logging"]["cpu_us_ratio"] is None and phases["rollout"]["cpu_us_ratio"] == 1.0
    assert doc["headline"] == {"better": [], "worse": []}
    assert doc["memory"] == doc["host_ops"] == [] and doc["recording_warning"] is None


def test_planted_reads_are_the_worse_headline():
    c = ab_comparison()
    doc = to_document(c)
    json.dumps(doc, allow_nan=False)
    assert doc["a"]["paths"] == [str(AB / "clean_1" / "rank-0.pt.trace.json.gz")]
    worse = doc["headline"]["worse"]
    assert [(w["kind"], w["item"], w["a"], w["b"], w["site"]) for w in worse] == [
        ("host_read", "item", 22.0, 30.0, "rollout > env_step > aten::item")]
    assert worse[0]["low_a"] is None  # a count has no interval
    assert doc["iterations"]["a"]["counted"] == [10, 11, 12, 13, 14, 15]


def test_top_limits_the_long_lists_only():
    c = ab_comparison()
    doc = to_document(c, top=2)
    assert [p["name"] for p in doc["phases"]] == c.phases["name"].head(2).tolist()
    assert len(doc["host_ops"]) == 2 < len(c.host_ops)
    assert len(doc["spread"]) == len(c.spread) > 2  # every time figure, whatever top
