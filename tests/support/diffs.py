"""Comparisons for the diff report's tests: two CPU run folders of our trainer (tests/data/ours/ab,
SOURCES.md), a small GPU pair (tests/data/hta, tracelens), and a hand-made pair of traces whose phases differ."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.compare.comparison import compare
from goodhart_prof.trace.load import load
from goodhart_prof.trace.run_record import read_run
from tests.support.paths import DATA

AB = DATA / "ours" / "ab"


@lru_cache(maxsize=None)
def ab_comparison(a: str = "clean_1", b: str = "item_logging"):
    """Two runs of tests/data/ours/ab compared (item_logging: 8 more `.item()` reads per
    iteration, 22 -> 30)."""
    return compare(analyze(load(AB / a)), analyze(load(AB / b)), read_run(AB / a), read_run(AB / b))


def steps_trace(path: Path, phases: tuple[str, ...]) -> Path:
    """One rank, five `ProfilerStep#N` (1000, 1010, 990, 1005, 995 us), each holding the given
    annotations of 200 us, 300 us apart; no GPU."""
    events, ts = [], 0.0
    for n, dur in enumerate((1000.0, 1010.0, 990.0, 1005.0, 995.0)):
        events.append({"ph": "X", "name": f"ProfilerStep#{n}", "cat": "user_annotation", "ts": ts,
                       "dur": dur, "pid": 1, "tid": 1})
        for k, name in enumerate(phases):
            events.append({"ph": "X", "name": name, "cat": "user_annotation", "ts": ts + 1 + 300 * k,
                           "dur": 200.0, "pid": 1, "tid": 1})
        ts += dur + 10
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def phase_pair(folder: Path):
    """A (phase `rollout`) against B (`rollout` and `logging`)."""
    a = steps_trace(folder / "a.json", ("rollout",))
    b = steps_trace(folder / "b.json", ("rollout", "logging"))
    return compare(analyze(load(a)), analyze(load(b)))



MI250 = DATA / "hta" / "mi250_minitoy_rocm.json.gz"
BERT = DATA / "tracelens" / "h100_bert_small_inference.json.gz"


@lru_cache(maxsize=None)
def gpu_comparison():
    """Two small GPU traces of others (SOURCES.md): a ROCm training step on an MI250 (A, no memory
    events) against bert-small inference on an H100 (B, with memory events)."""
    return compare(analyze(load(MI250)), analyze(load(BERT)))
