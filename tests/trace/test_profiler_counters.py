"""CUPTI range-profiler counters read beside the main decode (trace/profiler_counters.py), on HTA's
A100 trace recorded with counters (tests/data/hta/cupti_counters_a100.json.gz)."""
from __future__ import annotations

import gzip
import json

from goodhart_prof.trace.load import load
from goodhart_prof.trace.profiler_counters import read_counters
from tests.support.events import load_events, op
from tests.support.paths import DATA

CUPTI = DATA / "hta" / "cupti_counters_a100.json.gz"


def test_every_ranges_counters_are_read():
    raw = [e for e in json.load(gzip.open(CUPTI))["traceEvents"] if e.get("cat") == "cuda_profiler_range"]
    trace = load(CUPTI)
    c = trace.counters
    assert len(raw) == 77 and c.groupby(["rank", "ts"]).ngroups == 77
    assert len(c) == sum(len(e["args"]) for e in raw) == 693
    first = raw[0]
    got = c[c["ts"] == float(first["ts"])].set_index("counter")["value"].to_dict()
    assert got == {k: float(v) for k, v in first["args"].items()}
    assert trace.select(rank=0).counters.equals(c) and trace.select(rank=1).counters.empty


def test_a_trace_without_ranges_pays_nothing(tmp_path):
    trace = load_events(tmp_path, [op("aten::mm", 0, 5)])
    assert trace.counters is None and read_counters(trace).empty
