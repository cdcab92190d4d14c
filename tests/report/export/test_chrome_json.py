"""report/export/chrome_json.py: the Chrome JSON export. The original document kept as it is with
our counters, sync instants, launch flows and critical path appended (a hand-made trace: each
added event worked out by hand), the header of a plain file kept, and a folder of rank traces merged into one
document that reloads to the same analysis (the MI250 trace twice, as ranks 0 and 1)."""
from __future__ import annotations

import gzip
import json

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.report.export.chrome_json import (COUNTER_CAT, FLOW_CAT, PATH_CAT, SYNC_CAT,
                                                     write_chrome_json)
from goodhart_prof.report.export.common import ExportError
from goodhart_prof.trace.load import load
from tests.support.chrome_events import check_anchors, read_events
from tests.support.events import cuda_item, launch, load_events
from tests.support.paths import DATA

MI250 = DATA / "hta" / "mi250_minitoy_rocm.json.gz"


def analysis_of(path):
    return analyze(load(path))


def test_hand_made_trace_gets_its_flows_instant_and_counter(tmp_path):
    """k1 launched at 100 us (kernel at 110), k2 at 300 (310), and an `.item()` at 600 whose copy
    is launched at 605 (memcpy at 630)."""
    events = launch("k1", 100, 1, "aten::mm") + launch("k2", 300, 2) + cuda_item(600, 10)
    out = tmp_path / "out.json"
    summary = write_chrome_json(analyze(load_events(tmp_path, events)), out)
    doc = json.loads(out.read_text())
    assert doc["traceEvents"][:len(events)] == events  # the original, as it was
    added = doc["traceEvents"][len(events):]
    flows = [(e["ph"], e["id"], e["pid"], e["tid"], e["ts"]) for e in added if e["cat"] == FLOW_CAT]
    assert flows == [("s", 1, 100, 100, 100.0), ("f", 1, 0, 7, 110.0), ("s", 2, 100, 100, 300.0),
                     ("f", 2, 0, 7, 310.0), ("s", 3, 100, 100, 605.0), ("f", 3, 0, 7, 630.0)]
    assert all(e["bp"] == "e" for e in added if e["ph"] == "f")
    (sync,) = [e for e in added if e["cat"] == SYNC_CAT]
    assert (sync["ph"], sync["name"], sync["ts"]) == ("i", "sync item", 600.0)
    assert sync["args"] == {"kind": "item", "site": "aten::item", "iteration": -1, "dur_us": 50.0}
    counters = [e for e in added if e["cat"] == COUNTER_CAT]
    assert {e["name"] for e in counters} == {"GPU 0 utilization"} and {e["pid"] for e in counters} == {0}
    assert counters[0]["ts"] == 110.0 and counters[-1]["args"] == {"percent": 0.0}
    assert (summary.flows, summary.sync_instants, summary.counter_samples) == (3, 1, len(counters))
    # The critical path (no iterations: the whole trace, 118 us): aten::mm until its launch (1),
    # the launch (5), the rest of aten::mm (2); then k2's launch wait (300 -> 310) and k2 (100).
    path = [(e["ph"], e["name"], e["ts"]) for e in added if e["cat"] == PATH_CAT]
    assert path == [("b", "critical path (rank 0, whole trace)", 99.0),
                    ("b", "aten::mm", 99.0), ("e", "aten::mm", 100.0),
                    ("b", "cudaLaunchKernel", 100.0), ("e", "cudaLaunchKernel", 105.0),
                    ("b", "aten::mm", 105.0), ("e", "aten::mm", 107.0),
                    ("b", "(launch wait)", 300.0), ("e", "(launch wait)", 310.0),
                    ("b", "k2", 310.0), ("e", "k2", 410.0),
                    ("e", "critical path (rank 0, whole trace)", 410.0)]
    assert {(e["pid"], e["id"]) for e in added if e["cat"] == PATH_CAT} == {(100, 1)}
    assert summary.critical_path_slices == 5
    assert doc["goodhartProf"]["export"] == {"counters": len(counters), "sync_instants": 1, "flows": 3,
                                             "critical_path_slices": 5,
                                             "categories": [COUNTER_CAT, SYNC_CAT, FLOW_CAT, PATH_CAT]}
    check_anchors(read_events(out))
    assert len(load(out).events) == len(events)  # the loader skips the path's async slices


def test_existing_output_is_refused_before_the_work(tmp_path):
    out = tmp_path / "out.json"
    out.write_text("mine")
    with pytest.raises(ExportError, match="already exists"):
        write_chrome_json(analysis_of(MI250), out)
    assert out.read_text() == "mine"


def test_chrome_json_plain_file_keeps_the_header(tmp_path):
    out = tmp_path / "out.json"
    write_chrome_json(analysis_of(MI250), out)
    doc = json.loads(out.read_text())
    with gzip.open(MI250, "rt") as fh:
        original = json.load(fh)
    assert {k: v for k, v in doc.items() if k not in ("traceEvents", "goodhartProf")} == \
        {k: v for k, v in original.items() if k != "traceEvents"}
    assert doc["traceEvents"][:len(original["traceEvents"])] == original["traceEvents"]
    assert doc["goodhartProf"]["export"]["sync_instants"] == 3


def test_chrome_json_merges_a_folder_of_rank_traces(tmp_path):
    with gzip.open(MI250, "rt") as fh:
        doc = json.load(fh)
    folder = tmp_path / "ranks"
    folder.mkdir()
    for r in (0, 1):
        (folder / f"rank-{r}.json").write_text(json.dumps({**doc, "distributedInfo": {"rank": r}}))
    a = analyze(load(folder))
    out = tmp_path / "merged.json"
    summary = write_chrome_json(a, out)
    check_anchors(read_events(out))
    again = load(out)
    one = analysis_of(MI250).trace
    assert again.ranks == [0, 1] and again.rank_source == "process names"
    assert len(again.events) == len(a.trace.events) == 2 * len(one.events)
    assert summary.counter_tracks == 2 and summary.flows == 2 * len(one.gpu)
    assert analyze(again).gpu[["busy_us", "span_us"]].equals(a.gpu[["busy_us", "span_us"]])
