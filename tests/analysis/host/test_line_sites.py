"""Line-level sites (analysis/host/line_sites.py; the source side, find_body and SourceIndex, is in
test_source_lines.py) on two loops written the way users write them, instrumented as
docs/trainer.md says and recorded in full mode on the CPU (tests/data/ours/loops/, SOURCES.md):
every planted read on its own line, two reads in one function two sites, a read whose line the
trace cannot tell named by its function and candidate lines, and no line at all where the source
is not found."""
from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

import pytest

from goodhart_prof.analysis.host.syncs import sync_points
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

LOOPS = DATA / "ours" / "loops"


def _line_of(source: str, text: str) -> int:
    """The one line of `source` holding `text` (so the tests follow the loops' own source)."""
    hits = [i for i, line in enumerate(source.splitlines(), 1) if text in line]
    assert len(hits) == 1, (text, hits)
    return hits[0]


def _sites(trace_path: Path) -> Counter:
    points = sync_points(load(trace_path))
    return Counter(zip(points["kind"], points["site"]))


@pytest.fixture(scope="module")
def script_sites() -> Counter:
    return _sites(LOOPS / "script_loop.pt.trace.json.gz")


@pytest.fixture(scope="module")
def helper_sites() -> Counter:
    return _sites(LOOPS / "helper_loop.pt.trace.json.gz")


def test_a_prof_step_loop_puts_each_read_on_its_line():
    """torch.profiler's documented style (a schedule, `prof.step()` ending the loop body, no `with`
    per iteration): each ProfilerStep#N holds one pass of the body, so the two `.item()` reads of a
    pass are the body's two calls in order, not three candidates of the whole module."""
    src = (LOOPS / "step_loop.py").read_text()
    at = lambda text: f"step_loop.py:{_line_of(src, text)} <module>"  # noqa: E731
    assert _sites(LOOPS / "step_loop.pt.trace.json.gz") == Counter({
        ("item", at("first = logits[0, 0].item()")): 2,
        ("item", at("loss_value = loss.item()")): 2,
        ("is_nonzero", at("if (logits > 10).any():")): 2,
    })


def test_script_loop_every_read_on_its_own_line(script_sites):
    src = (LOOPS / "script_loop.py").read_text()
    at = lambda text: f"script_loop.py:{_line_of(src, text)} <module>"  # noqa: E731
    # two traced iterations: each planted read twice; print(tensor) reads 3 item + 5 truth each
    assert script_sites == Counter({
        ("item", at("first_action = actions[0].item()")): 2,
        ("item", at("loss_value = loss.item()")): 2,
        ("item", at("grad_norm = model[0].weight.grad.norm().item()")): 2,
        ("nonzero", at("chosen = (actions == first_action).nonzero()")): 2,
        ("is_nonzero", at("if (rewards > 0.99).any():")): 2,
        ("item", at("print(loss.detach())")): 6,
        ("is_nonzero", at("print(loss.detach())")): 10,
    })
    # the frame's own line (where tracing began, `with hooks.iteration(it):`) is never a site
    assert not any(site == at("with hooks.iteration(it):") for _, site in script_sites)


def test_helper_loop_two_reads_in_one_function_are_two_sites(helper_sites):
    src = (LOOPS / "helper_loop.py").read_text()
    at = lambda text, fn: f"helper_loop.py:{_line_of(src, text)} {fn}"  # noqa: E731
    assert helper_sites[("item", at("mean = values.mean().item()", "stats"))] == 2
    assert helper_sites[("item", at("top = values.max().item()", "stats"))] == 2
    assert helper_sites[("is_nonzero", at("if bool(loss > 100):", "update"))] == 2
    # train() was running when tracing began (its frame names line 51, not its def): the phases'
    # annotations still place its reads
    assert helper_sites[("nonzero", at("best = (rewards > 0.5).nonzero()", "train"))] == 2
    assert helper_sites[("item", at("print(loss.detach())", "train"))] == 6


def test_helper_loop_read_in_a_loop_names_the_function_and_claims_no_line(helper_sites):
    src = (LOOPS / "helper_loop.py").read_text()
    loop_read, last_read = _line_of(src, "out.append(v.item())"), _line_of(src, "out.append(values.sum().item())")
    def_line = _line_of(src, "def log_each(values):")
    undetermined = (f"in function log_each (helper_loop.py, defined at line {def_line}): "
                    f"candidate lines {loop_read}, {last_read}")
    # 3 reads in the loop and 1 after it per call, 2 calls: the order cannot tell them apart
    assert helper_sites[("item", undetermined)] == 8
    assert not any(site.startswith("helper_loop.py:") and site.endswith(" log_each")
                   for _, site in helper_sites)
    # every site names a line of a planted read or says it cannot
    for _, site in helper_sites:
        assert site.startswith(("helper_loop.py:", "in function log_each")), site


def test_missing_source_names_the_function_and_no_line(tmp_path, monkeypatch):
    shutil.copy(LOOPS / "helper_loop.pt.trace.json.gz", tmp_path / "helper_loop.pt.trace.json.gz")
    monkeypatch.chdir(tmp_path)  # neither beside the trace nor in the current directory
    sites = _sites(tmp_path / "helper_loop.pt.trace.json.gz")
    assert sites[("item", "in function stats (helper_loop.py, frame line 21)")] == 4
    assert sites[("nonzero", "in function train (helper_loop.py, frame line 51)")] == 2
    assert not any(":" in site.split(" ")[0] for _, site in sites), sites


def test_missing_source_of_module_code_names_where_tracing_began(tmp_path, monkeypatch):
    shutil.copy(LOOPS / "script_loop.pt.trace.json.gz", tmp_path / "script_loop.pt.trace.json.gz")
    monkeypatch.chdir(tmp_path)
    sites = _sites(tmp_path / "script_loop.pt.trace.json.gz")
    assert {site for _, site in sites} == {"in module code (script_loop.py, at line 17 when tracing began)"}
    assert sum(sites.values()) == 26


def test_a_source_too_big_or_too_deep_is_not_read(tmp_path, monkeypatch):
    """A frame's file over SOURCE_LIMIT (a hostile or odd trace may name any file) is not read,
    and a source nested too deep for the parser is skipped: the function is named, no line."""
    from goodhart_prof.analysis.host.source_files import SOURCE_LIMIT
    shutil.copy(LOOPS / "helper_loop.pt.trace.json.gz", tmp_path / "helper_loop.pt.trace.json.gz")
    src = tmp_path / "helper_loop.py"
    src.write_text((LOOPS / "helper_loop.py").read_text() + "#" * SOURCE_LIMIT + "\n")
    trace_mtime = (tmp_path / "helper_loop.pt.trace.json.gz").stat().st_mtime
    os.utime(src, (trace_mtime, trace_mtime))
    monkeypatch.chdir(tmp_path)
    sites = _sites(tmp_path / "helper_loop.pt.trace.json.gz")
    assert sites[("item", "in function stats (helper_loop.py, frame line 21)")] == 4
    src.write_text((LOOPS / "helper_loop.py").read_text() + "x = " + "(" * 100_000 + ")" * 100_000 + "\n")
    os.utime(src, (trace_mtime, trace_mtime))
    sites = _sites(tmp_path / "helper_loop.pt.trace.json.gz")
    assert sites[("item", "in function stats (helper_loop.py, frame line 21)")] == 4


def _changed_copy(tmp_path, monkeypatch, edited_after: bool) -> Counter:
    """The loop's trace beside its source with one line added at the top."""
    shutil.copy(LOOPS / "helper_loop.pt.trace.json.gz", tmp_path / "helper_loop.pt.trace.json.gz")
    src = tmp_path / "helper_loop.py"
    src.write_text("# a line added since the trace was recorded\n" + (LOOPS / "helper_loop.py").read_text())
    trace_mtime = (tmp_path / "helper_loop.pt.trace.json.gz").stat().st_mtime
    shift = 3600 if edited_after else -3600
    os.utime(src, (trace_mtime + shift, trace_mtime + shift))
    monkeypatch.chdir(tmp_path)
    return _sites(tmp_path / "helper_loop.pt.trace.json.gz")


def test_source_edited_after_the_trace_claims_no_line(tmp_path, monkeypatch):
    sites = _changed_copy(tmp_path, monkeypatch, edited_after=True)
    assert sites[("item", "in function stats (helper_loop.py, frame line 21)")] == 4
    assert not any(site.startswith("helper_loop.py:") for _, site in sites), sites


def test_changed_source_fails_the_frame_checks(tmp_path, monkeypatch):
    """With an mtime older than the trace, the shifted file fails the frame checks: no `def stats`
    on line 21, no `def update` on line 35, so the functions entered while tracing claim no line.
    (train(), running when tracing began, is checked only by its line making a call: line 51 is
    now `for it in range(total):`, which does; the mtime check above is what guards it.)"""
    sites = _changed_copy(tmp_path, monkeypatch, edited_after=False)
    assert sites[("item", "in function stats (helper_loop.py, frame line 21)")] == 4
    assert sites[("is_nonzero", "in function update (helper_loop.py, frame line 35)")] == 2
    assert not any(site.startswith("helper_loop.py:") and not site.endswith(" train")
                   for _, site in sites), sites


DIST_LOOP = '''import torch


def policy_step(net, x):
    logits = net(x)
    dist = torch.distributions.Categorical(logits=logits)
    action = dist.sample()
    return -dist.log_prob(action).mean()
'''


def test_torch_distributions_reads_name_the_calling_line(tmp_path):
    """A read inside torch.distributions (frames kept) is put on the user's call of it: the one
    `log_prob` call is a line; `Categorical(...)`, seen as `__init__`, names no call: no line."""
    import importlib.util

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function
    (tmp_path / "distloop.py").write_text(DIST_LOOP)
    spec = importlib.util.spec_from_file_location("distloop", tmp_path / "distloop.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    net, x = torch.nn.Linear(4, 3), torch.randn(8, 4)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        for i in range(2):
            with record_function(f"ProfilerStep#{i}"):
                mod.policy_step(net, x)
    prof.export_chrome_trace(str(tmp_path / "dist.json"))
    sites = _sites(tmp_path / "dist.json")
    path = str(tmp_path / "distloop.py")
    log_prob_at = f"(called at {path}:{_line_of(DIST_LOOP, 'dist.log_prob(action)')} policy_step)"
    init_at = f"(called at function policy_step ({path}, defined at line 4))"
    assert sum(n for (kind, site), n in sites.items() if site.endswith(log_prob_at)) == 2
    assert sum(n for (kind, site), n in sites.items() if site.endswith(init_at)) == 2
    assert all(site.startswith("torch: torch/distributions/") for _, site in sites), sites


CHECK_LOOP = '''import torch


def locate_nan_rows(x):
    bad = torch.isnan(x).any(dim=1)
    rows = torch.where(bad)[0]
    if len(rows):
        raise FloatingPointError(f"NaN in rows {rows.tolist()}")
    return x.sum().item()
'''


def _record_module(tmp_path, name: str, code: str, call) -> Counter:
    """Record `call(module)` from a module written beside the trace (its frames name it by
    absolute path), twice under ProfilerStep annotations."""
    import importlib.util

    from torch.profiler import ProfilerActivity, profile, record_function
    (tmp_path / f"{name}.py").write_text(code)
    spec = importlib.util.spec_from_file_location(name, tmp_path / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        for i in range(2):
            with record_function(f"ProfilerStep#{i}"):
                call(mod)
    prof.export_chrome_trace(str(tmp_path / f"{name}.json"))
    return _sites(tmp_path / f"{name}.json")


def test_a_certain_call_before_a_branch_is_its_line(tmp_path):
    """torch.where(cond) makes exactly one nonzero each run, so the frame's first nonzero is its
    line, though the f-string in the `raise` branch could format a tensor; `.item()` after the
    branch has the f-string before it (it may read too): no line, both candidates named."""
    import torch
    sites = _record_module(tmp_path, "checks", CHECK_LOOP, lambda m: m.locate_nan_rows(torch.ones(4, 3)))
    path = str(tmp_path / "checks.py")
    where_at = _line_of(CHECK_LOOP, "torch.where(bad)")
    raise_at, item_at = _line_of(CHECK_LOOP, "raise FloatingPointError"), _line_of(CHECK_LOOP, ".item()")
    assert sites[("nonzero", f"{path}:{where_at} locate_nan_rows")] == 2
    assert sites[("item", f"in function locate_nan_rows ({path}, defined at line 4): "
                          f"candidate lines {raise_at}, {item_at}")] == 2


def test_json_sites_carry_where():
    from goodhart_prof.analysis import analyze
    from goodhart_prof.report.json_report import to_document
    doc = to_document(analyze(load(LOOPS / "helper_loop.pt.trace.json.gz")))
    where = {s["site"]: s["where"] for s in doc["host_reads"]["sites"]}
    src = (LOOPS / "helper_loop.py").read_text()
    mean_at = _line_of(src, "mean = values.mean().item()")
    assert where[f"helper_loop.py:{mean_at} stats"] == {
        "file": "helper_loop.py", "function": "stats", "line": mean_at, "frame_line": None,
        "candidates": [mean_at]}
    (log_each,) = [w for s, w in where.items() if s.startswith("in function log_each")]
    assert log_each == {"file": "helper_loop.py", "function": "log_each", "line": None,
                        "frame_line": _line_of(src, "def log_each"),
                        "candidates": [_line_of(src, "out.append(v.item())"),
                                       _line_of(src, "out.append(values.sum().item())")]}


COUNT_LOOP = '''import numpy as np


def reads(t, arr):
    a = float(t.sum())
    b = t.max().item()
    return a, b


def mixed(t, arr):
    c = arr.mean().item()
    d = t.sum().item()
    return c, d
'''


def test_order_needs_as_many_events_as_sites(tmp_path):
    """float(t) then .item(): two events, two sites, each on its line. A numpy .item() (no event)
    before a tensor's: one event for two sites, so the trace cannot say which: no line."""
    import numpy as np
    import torch
    arr = np.arange(4.0)
    sites = _record_module(tmp_path, "counts", COUNT_LOOP,
                           lambda m: (m.reads(torch.ones(3), arr), m.mixed(torch.ones(3), arr)))
    path = str(tmp_path / "counts.py")
    at = lambda text, fn: f"{path}:{_line_of(COUNT_LOOP, text)} {fn}"  # noqa: E731
    assert sites[("item", at("a = float(t.sum())", "reads"))] == 2
    assert sites[("item", at("b = t.max().item()", "reads"))] == 2
    c_at, d_at = _line_of(COUNT_LOOP, "c = arr.mean().item()"), _line_of(COUNT_LOOP, "d = t.sum().item()")
    mixed_def = _line_of(COUNT_LOOP, "def mixed")
    assert sites[("item", f"in function mixed ({path}, defined at line {mixed_def}): "
                          f"candidate lines {c_at}, {d_at}")] == 2
    assert not any(site.endswith(" mixed") and site.startswith(path) for _, site in sites)
