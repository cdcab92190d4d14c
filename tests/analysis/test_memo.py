"""The per-trace memo of derived tables (analysis/memo.py): built once per trace and key, kept
apart per trace (a `dataclasses.replace` copy included), and gone with its trace, after a whole
analysis too (no derived table holds its trace)."""
from __future__ import annotations

import dataclasses
import gc

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.memo import derived, memo_count, memo_of
from goodhart_prof.analysis.tree import host_tree
from tests.support.events import ann, cuda_item, launch, load_events, op


def _events() -> list[dict]:
    return [ann("ProfilerStep#1", 0, 1000), op("aten::add", 10, 100), *cuda_item(200, 1),
            *launch("k", 400, 10, "aten::mul"), ann("ProfilerStep#2", 1000, 1000), op("aten::add", 1010, 100)]


def test_built_once_per_trace_and_key(tmp_path):
    trace = load_events(tmp_path, _events())
    calls = []

    def build(t):
        calls.append(t)
        return len(t.events)

    assert derived(trace, "n", build) == derived(trace, "n", build) == len(trace.events)
    assert calls == [trace]
    copy = dataclasses.replace(trace)  # an equal trace, another object: a memo of its own
    assert derived(copy, "n", build) == len(trace.events) and len(calls) == 2
    assert memo_of(trace) is not memo_of(copy) and set(memo_of(trace)) == {"n"}


def test_the_memo_goes_with_its_trace_after_a_whole_analysis(tmp_path):
    gc.collect()
    before = memo_count()
    trace = load_events(tmp_path, _events())
    result = analyze(trace)
    assert memo_count() == before + 1
    assert host_tree(trace) is memo_of(trace)["host_tree"]
    assert {"host_tree", "gpu_launches", "iterations"} <= set(memo_of(trace))
    assert [int(s) for s in result.phases_by_rank["iteration"].dropna().unique()] == [1, 2]
    del trace, result
    gc.collect()
    assert memo_count() == before
