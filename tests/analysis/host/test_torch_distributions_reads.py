"""Reads made by torch's own Python code are torch's: `torch.distributions.Categorical(logits=...)`
validates its arguments with data-dependent checks (`if not valid.all():`), which read tensors
back each call. The sync finding names torch.distributions, the function and the user's line,
and advises validate_args=False (not torch.where); with validation off it is gone
(trace/tables.py keeps torch/distributions frames, analysis/host/sites.py, analysis/rules/syncs.py)."""
from __future__ import annotations

import inspect
import re

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from goodhart_prof.analysis import analyze
from goodhart_prof.trace.load import load


def _policy_step(net, opt, x, validate):
    logits = net(x)
    dist = torch.distributions.Categorical(logits=logits, validate_args=validate)
    action = dist.sample()
    loss = -dist.log_prob(action).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def record(path, validate: bool, steps: int = 3):
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(8, 4)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        for i in range(steps):
            with record_function(f"ProfilerStep#{i}"):
                _policy_step(net, opt, x, validate)
    prof.export_chrome_trace(str(path))
    return analyze(load(path))


def test_distribution_validation_reads_are_torch_own(tmp_path):
    a = record(tmp_path / "on.json", validate=True)
    reads = a.reads.sites
    branchy = reads[reads["kind"] == "is_nonzero"]
    # Categorical's __init__ and log_prob each validate once per step: 2 per iteration, 3 steps
    assert int(branchy["count"].sum()) == 6
    # the reads are torch's own, each placed at the user's call that led there: `dist.log_prob(...)`
    # on its line; the constructor `Categorical(...)` runs `__init__`, a name no call in the
    # function spells, so no line is claimed for it, only the function
    here, first = "tests/analysis/host/test_torch_distributions_reads.py", _policy_step.__code__.co_firstlineno
    log_prob_line = first + inspect.getsource(_policy_step).splitlines().index(
        "    loss = -dist.log_prob(action).mean()")
    torch_line = re.compile(r"torch: torch/distributions/categorical\.py:\d+ ")  # torch's lines vary by version
    sites = sorted(torch_line.sub("torch: torch/distributions/categorical.py:N ", site) for site in branchy["site"])
    assert sites == [
        "torch: torch/distributions/categorical.py:N __init__ > aten::is_nonzero "
        f"(called at function _policy_step ({here}, defined at line {first}))",
        "torch: torch/distributions/categorical.py:N log_prob > aten::is_nonzero "
        f"(called at {here}:{log_prob_line} _policy_step)",
    ], list(branchy["site"])
    found = {f.rule: f for f in a.findings}
    f = found["branchy_value_head"]
    assert f.evidence["torch_own"] == "torch.distributions"
    assert f.evidence["count"] == 6 and f.evidence["per_iteration"] == 2.0
    assert f.title.startswith("torch.distributions validates its arguments")
    assert "torch/distributions/categorical.py:" in f.title
    # the title names the first site: the constructor's, the function without a line
    assert f"called at function _policy_step ({here}, defined at line {first})" in f.title
    assert "validate_args=False" in f.fix and "set_default_validate_args(False)" in f.fix
    assert "torch.where" not in f.fix


def test_without_validation_the_finding_is_gone(tmp_path):
    a = record(tmp_path / "off.json", validate=False)
    assert a.reads.by_kind["is_nonzero"] == 0
    assert "branchy_value_head" not in {f.rule for f in a.findings}
    assert not any("torch.distributions" in f.title for f in a.findings)
