"""Reads made inside torch.nn.utils are torch's (trace/model.py KEPT_TORCH_FRAMES):
clip_grad_norm_(..., error_if_nonfinite=True) checks the norm with a Python `if` on a tensor, a
read-back every call. sync_grad_clip names clip_grad_norm_, the user's line and the flag, and
advises dropping it (not the generic "clip without reading the norm", which is what the user
already calls); without the flag there is no read and no finding."""
from __future__ import annotations


import torch
from torch.profiler import ProfilerActivity, profile, record_function

from goodhart_prof.analysis import analyze
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

LOOP = DATA / "ours" / "user_loops" / "clip_nonfinite"


def _finding(a, rule):
    return next((f for f in a.findings if f.rule == rule), None)


def test_recorded_loop_names_clip_grad_norm():
    a = analyze(load(LOOP, progress=False))
    f = _finding(a, "sync_grad_clip")
    assert f is not None and f.evidence["torch_own"] == "torch.nn.utils.clip_grad_norm_"
    # 4 minibatches per iteration, one check each, 3 traced iterations
    assert f.evidence["count"] == 12 and f.evidence["per_iteration"] == 4.0
    site = f.evidence["sites"][0]["site"]
    assert site.startswith("torch: torch/nn/utils/clip_grad.py:") and "aten::is_nonzero" in site
    assert "(called " in site and "clip_nonfinite.py" in site  # the user's call (analysis/host/sites.py)
    assert "error_if_nonfinite=True" in f.title and "clip_nonfinite.py" in f.title
    assert "error_if_nonfinite" in f.fix and "foreach=True" not in f.fix
    assert _finding(a, "branchy_value_head") is None  # the check is clipping's, not a branch of the user's


def _clip_step(net, opt, x, nonfinite):
    loss = net(x).square().mean()
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0, error_if_nonfinite=nonfinite)
    opt.step()


def _record(path, nonfinite: bool):
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(8, 4)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        for i in range(3):
            with record_function(f"ProfilerStep#{i}"):
                _clip_step(net, opt, x, nonfinite)
    prof.export_chrome_trace(str(path))
    return analyze(load(path, progress=False))


def test_without_the_flag_nothing_is_read(tmp_path):
    on = _record(tmp_path / "on.json", True)
    assert _finding(on, "sync_grad_clip").evidence["torch_own"] == "torch.nn.utils.clip_grad_norm_"
    off = _record(tmp_path / "off.json", False)
    assert _finding(off, "sync_grad_clip") is None
    assert off.reads.by_kind.get("is_nonzero", 0) == 0
