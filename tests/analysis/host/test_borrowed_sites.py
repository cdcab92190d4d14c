"""Sites of a lite trace borrowed from its attribution iteration (analysis/host/borrowed_sites.py):
one site per chain, the k-th of a chain called from several lines, the lines it may be when the
counts differ, a chain the attribution iteration lacks kept as it is."""
from __future__ import annotations

import shutil

from goodhart_prof.analysis.facade import analyze
from goodhart_prof.analysis.host.borrowed_sites import sites_from
from goodhart_prof.analysis.host.sites import op_sites
from goodhart_prof.trace.load import load
from tests.support.events import X, ann, load_events, op
from tests.support.paths import DATA


def frame(name, ts, dur, python_id, parent=-1):
    return X(name, "python_function", ts, dur, **{"Python id": python_id, "Python parent id": parent})


def _window(reads_per_step: int = 2):
    """Iterations 2 and 3 without stacks: in each, `reads_per_step` aten::item under ppo_update,
    one aten::nonzero under rollout, one aten::mul (not in the attribution iteration)."""
    events = []
    for k, start in ((2, 0), (3, 1000)):
        events += [ann(f"ProfilerStep#{k}", start, 900), ann("rollout", start + 10, 100),
                   op("aten::nonzero", start + 20, 10), ann("ppo_update", start + 200, 600),
                   op("aten::mul", start + 700, 5)]
        events += [op("aten::item", start + 300 + 100 * i, 10) for i in range(reads_per_step)]
    return events


# Iteration 4, with stacks: the first read in loss_value, the second in log_grad (two lines).
ATTRIBUTION = [ann("ProfilerStep#4", 5000, 900), ann("rollout", 5010, 100),
               frame("loop.py(20): collect", 5005, 150, 1), op("aten::nonzero", 5020, 10),
               ann("ppo_update", 5200, 600), frame("loop.py(40): update", 5195, 610, 2),
               frame("loop.py(50): loss_value", 5290, 30, 3, parent=2), op("aten::item", 5300, 10),
               frame("loop.py(60): log_grad", 5390, 30, 4, parent=2), op("aten::item", 5400, 10)]


def _traces(tmp_path, reads_per_step=2):
    trace = load_events(tmp_path, _window(reads_per_step), name="lite.json")
    companion = load_events(tmp_path, ATTRIBUTION, name="stacks.json")
    trace.attribution = companion
    return trace, companion


def _ops(trace, name):
    ev = trace.events
    return ev.index[(ev["name"].astype(str) == name).to_numpy()]


def test_each_read_takes_the_site_of_its_namesake_in_the_attribution_iteration(tmp_path):
    trace, companion = _traces(tmp_path)
    first, second = op_sites(companion, _ops(companion, "aten::item"))
    (nonzero,) = op_sites(companion, _ops(companion, "aten::nonzero"))
    assert first != second and "loss_value" in first and "log_grad" in second and "collect" in nonzero
    # per iteration, in order: the k-th read of the chain takes the k-th site
    assert op_sites(trace, _ops(trace, "aten::item")) == [first, second, first, second]
    assert op_sites(trace, _ops(trace, "aten::nonzero")) == [nonzero, nonzero]
    assert op_sites(trace, _ops(trace, "aten::mul")) == ["ppo_update > aten::mul"] * 2  # not there: the chain
    assert sites_from(trace) == {"iterations": [4], "timed_iterations": [2, 3],
                                 "paths": [str(tmp_path / "stacks.json")]}


def test_counts_that_differ_name_the_lines_it_may_be(tmp_path):
    trace, companion = _traces(tmp_path, reads_per_step=3)
    first, second = op_sites(companion, _ops(companion, "aten::item"))
    expected = f"ppo_update > aten::item (one of: {'; '.join(sorted([first, second]))})"
    assert op_sites(trace, _ops(trace, "aten::item")) == [expected] * 6


def test_a_trace_with_its_own_stacks_or_no_attribution_keeps_its_sites(tmp_path):
    trace = load_events(tmp_path, _window(), name="lite.json")
    assert op_sites(trace, _ops(trace, "aten::item"))[0] == "ppo_update > aten::item"
    assert sites_from(trace) is None
    own = load_events(tmp_path, ATTRIBUTION, name="own.json")
    own.attribution = load_events(tmp_path, _window(), name="other.json")
    assert sites_from(own) is None and "loss_value" in op_sites(own, _ops(own, "aten::item"))[0]


ITEM_LOGGING = DATA / "ours" / "attribution" / "item_logging_lite"  # tests/data/SOURCES.md


def test_a_lite_run_of_the_trainer_names_the_planted_line(tmp_path):
    """The label: the trainer with `--inject item_logging`, lite window 10-15 and iteration 16 with
    stacks. The planted read is trainer/antipatterns.py:38 (`log.append(res.proxy_reward.mean().item())`
    in step_and_log), 8 env steps an iteration: 48 reads in the window. Without the attribution trace
    the same finding names an op chain and no_python_stacks asks for a full recording."""
    analysis = analyze(load(ITEM_LOGGING))
    (finding,) = [f for f in analysis.findings if f.rule == "item_logging"]
    assert finding.evidence["sites"][0]["site"] == "trainer/antipatterns.py:38 step_and_log"
    assert finding.evidence["sites"][0]["count"] == 48
    assert "no_python_stacks" not in [f.rule for f in analysis.findings]
    lone = tmp_path / "lite"
    lone.mkdir()
    shutil.copy(ITEM_LOGGING / "rank-0.pt.trace.json.gz", lone)
    alone = analyze(load(lone))
    (finding,) = [f for f in alone.findings if f.rule == "item_logging"]
    top = finding.evidence["sites"][0]
    assert top["count"] == 48 and ".py" not in top["site"] and top["site"].endswith("aten::item")
    assert "no_python_stacks" in [f.rule for f in alone.findings]
