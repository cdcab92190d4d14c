"""Torch's own reads in full mode: `.item()` inside `Optimizer.step` is torch's, not the line
that called `optimizer.step()` (analysis/host/sites.py), and no rule counts it."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.rules.base import Context
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

FULL = DATA / "ours" / "cpu_full_mode.pt.trace.json.gz"


def raw_items_in_optimizer_step(path: Path) -> int:
    """`aten::item` calls inside an `Optimizer.step#` annotation on the same thread, from the JSON."""
    with gzip.open(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("cat") == "user_annotation" and e["name"].startswith("Optimizer.step#")]
    items = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::item"]
    return sum(any(t == e["tid"] and a <= e["ts"] and e["ts"] + e["dur"] <= b for t, a, b in steps)
               for e in items)


def test_full_mode_site_says_torch_own_and_rules_skip_it():
    a = analyze(load(FULL))
    assert len(a.trace.frames) > 0  # full mode: Python stacks, so sites are user lines
    sites = a.reads.sites  # a CPU-only trace: host reads
    own = sites[sites["site"].str.startswith("torch: ")]
    assert list(own["site"]) == ["torch: Optimizer.step#Adam.step > aten::_fused_adam_ > aten::item "
                                 "(called at function ppo_update (trainer/ppo.py, frame line 127))"]
    assert int(own["count"].iloc[0]) == raw_items_in_optimizer_step(FULL) == 40
    # the user's own line keeps its plain site; none of torch's reads is put on a user line bare
    assert sites.loc[~sites["site"].str.startswith("torch: "), "count"].sum() == a.reads.total - 40
    # trainer/ppo.py has changed since this trace was recorded (no `def ppo_update` at line 127
    # now): no line is claimed from it
    assert not any(s.startswith("trainer/ppo.py:") for s in sites["site"])
    origin = Context(a).sync_origin
    mine = origin["site"].str.startswith("torch: ").to_numpy()
    assert mine.sum() == 40 and origin["internal"].to_numpy()[mine].all()
    assert not any(f.rule == "item_logging" for f in a.findings)


def test_lite_mode_chain_is_unchanged():
    """Without stacks the chain already names the annotation: no `torch:` label."""
    a = analyze(load(DATA / "ours" / "cpu_2rank_merged.json.gz"))
    sites = list(a.reads.sites["site"])
    assert "ppo_update > minibatch > optimizer_step > Optimizer.step#Adam.step > aten::_fused_adam_ > aten::item" in sites
    assert not any(s.startswith("torch: ") for s in sites)
