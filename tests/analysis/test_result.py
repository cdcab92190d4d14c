"""`Analysis` (goodhart_prof/analysis/result.py): what the facade fills in, and what an analysis
built by hand (a notebook, a test) holds until it is computed: None for the optional results, an
empty table for the optional tables."""
from __future__ import annotations

import pandas as pd

from goodhart_prof.analysis import Analysis, analyze
from goodhart_prof.analysis.host.syncs import sync_summary
from goodhart_prof.trace.load import load
from tests.support.paths import DATA


def test_a_hand_built_analysis_says_what_is_not_computed():
    trace = load(DATA / "hta" / "mi250_minitoy_rocm.json.gz", progress=False)
    empty = pd.DataFrame()
    a = Analysis(trace=trace, gpu=empty, kernels=empty, categories=empty, sync_points=empty,
                 syncs=sync_summary(pd.DataFrame(columns=["kind", "site", "iteration", "dur_us"])),
                 burstiness=[], phases=empty)
    assert a.communication is None and a.ranks is None and a.memory is None
    assert a.efficiency is None and a.critical_path is None and a.reads is None
    assert a.findings == [] and a.not_judged == []
    assert a.host_reads.empty and a.libraries.empty and a.host_ops.empty
    assert a.timing.seconds == {}


def test_the_facade_fills_every_result():
    a = analyze(load(DATA / "hta" / "mi250_minitoy_rocm.json.gz", progress=False))
    assert a.communication is not None and a.ranks is not None and a.memory is not None
    assert a.efficiency is not None and a.critical_path is not None and a.reads is not None
    assert len(a.burstiness) == a.gpu.shape[0]  # one per (rank, device)
