"""CPU-only training loops recorded here with torch.profiler: host-built data moved with `.to()`
(pageable_htod judged from the host ops: nothing is copied) and host reads (`.item()` counted;
`.cpu().numpy()` leaves no event at all), and what the reports say of them."""
from __future__ import annotations

import io
import re

import numpy as np
import pytest
import torch
from rich.console import Console
from torch.profiler import ProfilerActivity, profile, schedule

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.host.syncs import CPU_NO_READS_NOTE, CPU_READS_NOTE
from goodhart_prof.report.text import report as text
from goodhart_prof.report.html.host import sync_note
from goodhart_prof.trace.load import load

ACTIVE = 3  # traced iterations


def _record(path, step) -> object:
    with profile(activities=[ProfilerActivity.CPU], with_stack=True, record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=ACTIVE),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(1 + ACTIVE):
            step()
            prof.step()
    return analyze(load(path))


def _report(a) -> str:
    buf = io.StringIO()
    text.render(a, Console(file=buf, width=400, force_terminal=False, color_system=None))
    return re.sub(r"\s+", " ", buf.getvalue())


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    w = torch.nn.Linear(4, 1)

    def step():
        obs = torch.from_numpy(np.random.rand(8, 4).astype(np.float32)).to("cpu")  # host-built, "moved"
        loss = w(obs).mean()
        loss.backward()
        loss.item()                                 # a host read: an op, counted
        w.weight.detach().cpu().numpy()             # no-ops on a CPU tensor: no event
    return _record(tmp_path_factory.mktemp("cpu") / "loop.json", step)


def test_pageable_htod_on_a_cpu_only_trace_says_nothing_is_copied(loop):
    f = {f.rule: f for f in loop.findings}["pageable_htod"]
    assert f.evidence["count"] == ACTIVE and f.evidence["per_iteration"] == 1.0
    assert f.evidence["gpu_copies"] == 0 and f.evidence["host_data_moves"] == ACTIVE
    assert f.evidence["copy_us"] == 0.0 and f.evidence["bytes"] == 0.0
    # the test's file is found from neither the trace's folder nor the current directory: the
    # function is named, no line claimed (analysis/host/line_sites.py)
    assert f.evidence["sites"][0]["site"].startswith("in function step (") and f.evidence["sites"][0]["count"] == ACTIVE
    assert f.title == (f"{ACTIVE} `.to()` calls on host-built data (numpy/lists) on a CPU-only trace "
                       "(1.0 per iteration): no copy here, but each would be a pageable "
                       "host-to-device copy on a GPU (judged from the host ops only)")
    assert "to the device" not in f.title and "ms on the GPU" not in f.title
    assert f.evidence["judged_from"].startswith("host ops only")
    assert f.fix.startswith("On a GPU: create the data on the device")
    assert f.est_saving_us is None


def test_text_report_on_a_cpu_only_trace_counts_item_and_says_cpu_numpy_leave_nothing(loop):
    assert loop.syncs.total == 0
    assert loop.reads.total == ACTIVE and loop.reads.by_kind["item"] == ACTIVE
    assert {k for k, v in loop.reads.by_kind.items() if v} == {"item"}  # .cpu().numpy(): nothing
    out = _report(loop)
    assert f"Host reads on CPU-only rank(s): {ACTIVE} (item {ACTIVE}). {CPU_READS_NOTE}" in out
    assert ("`.cpu()` and `.numpy()` on CPU tensors are no-ops that leave no event at all, so "
            "their absence here means nothing.") in out
    assert "the host never waited for the device" not in out
    note = sync_note(loop)
    assert note.startswith(f"No sync points: this is a CPU-only trace. {ACTIVE} host reads (item {ACTIVE}).")
    assert "no event at all" in note


def test_cpu_only_trace_without_reads_says_their_absence_means_nothing(tmp_path):
    x = torch.ones(4)
    a = _record(tmp_path / "noreads.json", lambda: (x * 2).cpu().numpy())
    assert a.syncs.total == 0 and a.reads.total == 0
    out = _report(a)
    assert f"Sync points: none, {CPU_NO_READS_NOTE}" in out
    assert "the host never waited for the device" not in out
    assert sync_note(a).startswith("No sync points: a CPU-only trace, where nothing waits")
