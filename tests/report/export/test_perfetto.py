"""The Perfetto export holds every event of the trace: per category as many slices as the source
file has complete events (Python frames included), its instants and counters, on tracks named
from the trace's metadata. Counted here from the raw JSON, read back from the .pftrace with the
perfetto package's protobuf classes."""
from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.report.export.perfetto import write_perfetto
from goodhart_prof.trace.load import load
from tests.support.pftrace import decode
from tests.support.paths import DATA

OWLV2 = DATA / "tracelens" / "h100_owlv2_inference.json.gz"
DLRM = DATA / "param" / "dlrm_8rank"
SIMPLE_ADD = DATA / "hta" / "critical_path_simple_add.json.gz"
OURS = ("iteration", "sync", "critical_path")  # our own additions' categories


def raw_events(path: Path) -> list[dict]:
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def source_counts(events: list[dict]) -> tuple[Counter, Counter]:
    """Complete events per category and instants per (category, name) of one file."""
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    complete = Counter(e.get("cat") for e in timed if e.get("ph") == "X")
    instants = Counter((e.get("cat") or "", e.get("name")) for e in timed if e.get("ph") in ("i", "I"))
    return complete, instants


def export(path: Path, tmp_path: Path):
    out = tmp_path / "out.pftrace"
    summary = write_perfetto(analyze(load(path)), out)
    return summary, decode(out)


def track_names(d) -> list[str]:
    return [d.name(u) for u in d.tracks]


def assert_no_stand_in_ids(d) -> None:
    """No track shows the loader's negative stand-in for a text id (`pid -2 thread -3`)."""
    for name in track_names(d):
        assert "pid -" not in name and not re.search(r"thread -\d", name), name


def test_owlv2_export_holds_every_event_of_the_trace(tmp_path):
    events = raw_events(OWLV2)
    complete, instants = source_counts(events)
    assert complete["python_function"] == 65_313  # the file is TraceLens's OWLv2 trace itself
    summary, d = export(OWLV2, tmp_path)

    assert Counter(s[4] for s in d.slices if s[4] not in OURS) == complete
    assert summary.python_slices == complete["python_function"]
    assert summary.slices == sum(complete.values())
    assert Counter((i[4], i[2]) for i in d.instants if i[4] not in OURS) == instants
    assert summary.trace_instants == sum(instants.values()) == 13_476
    # the [memory] instants keep their args
    memory = [i for i in d.instants if i[2] == "[memory]"]
    source = [e for e in events if e.get("name") == "[memory]"]
    assert sorted(i[3]["Bytes"] for i in memory) == sorted(e["args"]["Bytes"] for e in source)

    # Names from the metadata: the process is the main CPU process's `process_name` with its
    # labels, every CPU thread with events its `thread_name`, GPU streams `GPU d stream s`.
    meta = [e for e in events if e.get("ph") == "M"]
    procs = [t for t in d.tracks.values() if t.HasField("process")]
    assert [(p.process.process_name, list(p.process.process_labels)) for p in procs] == [("python3", ["CPU"])]
    assert procs[0].process.pid == 21587 and procs[0].process.legacy_sort_index == 21587
    threads = {d.name(u) for u, t in d.tracks.items() if t.HasField("thread")}
    busy = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "X" and e.get("cat") in
            ("cpu_op", "python_function", "cuda_runtime")}
    named = {e["args"]["name"].strip() for e in meta
             if e["name"] == "thread_name" and (e["pid"], e["tid"]) in busy}
    assert named == {"thread 21587 (python3)", "thread 21716 (python3)"} and named <= threads
    streams = {f"GPU {e['args']['device']} stream {e['args']['stream']}" for e in events
               if e.get("cat") == "kernel"}
    assert streams == {n for n in track_names(d) if n.startswith("GPU ") and "stream" in n}
    # Kineto's `Trace` span (pid "Spans", tid "PyTorch Profiler") keeps its text ids.
    span = [s for s in d.slices if s[4] == "Trace"]
    assert [d.name(s[0]) for s in span] == ["Spans / PyTorch Profiler"]
    # the two global instants on the global track, the rest on the thread they were written on
    assert sorted(i[2] for i in d.instants if d.name(i[0]) == "global instants") == \
        ["Iteration Start: PyTorch Profiler", "Record Window End"]
    assert {d.name(i[0]) for i in memory} == {"thread 21587 (python3)"}
    assert_no_stand_in_ids(d)


def test_critical_path_track(tmp_path):
    """HTA's simple_add (no iterations: the whole trace's path, 41,435,012 us): one track under the
    rank, a slice per span of the path named by its event, in time order, adding up to its length."""
    a = analyze(load(SIMPLE_ADD))
    it = a.critical_path.shown
    out = tmp_path / "out.pftrace"
    summary = write_perfetto(a, out)
    d = decode(out)
    path = [s for s in d.slices if s[4] == "critical_path"]
    assert {d.name(s[0]) for s in path} == {"critical path (rank 0, whole trace)"}
    assert len(path) == len(it.spans) == summary.critical_path_slices == 1026
    assert sum(s[2] - s[1] for s in path) == 41_435_012_000  # ns: the path's length
    assert [s[3] for s in sorted(path, key=lambda s: s[1])] == it.spans["name"].tolist()
    longest = max(path, key=lambda s: s[2] - s[1])  # the raw trace's one long call: 24,587,242 us
    assert (longest[3], longest[2] - longest[1]) == ("cudaDeviceGetStreamPriorityRange", 24_587_242_000)
    assert {s[5] for s in path} == {0}  # one lane: the spans follow each other


def test_multi_rank_export_per_rank_and_category(tmp_path):
    files = sorted(DLRM.glob("*.json.gz"))
    want_slices: Counter = Counter()
    want_instants: Counter = Counter()
    thread_names: dict = {}
    for path in files:
        doc_events = raw_events(path)
        with gzip.open(path, "rt") as fh:
            rank = json.load(fh)["distributedInfo"]["rank"]
        complete, instants = source_counts(doc_events)
        want_slices.update({(f"rank {rank}", c): n for c, n in complete.items()})
        want_instants.update({(f"rank {rank}", k): n for k, n in instants.items()})
        busy = {(e["pid"], e["tid"]) for e in doc_events if e.get("cat") == "cpu_op"}
        thread_names[f"rank {rank}"] = {e["args"]["name"].strip() for e in doc_events if e.get("ph") == "M"
                                        and e["name"] == "thread_name" and (e["pid"], e["tid"]) in busy}
    summary, d = export(DLRM, tmp_path)

    got = Counter((d.rank_of(s[0]), s[4]) for s in d.slices if s[4] not in OURS)
    assert got == want_slices and summary.slices == sum(want_slices.values())
    global_track = [u for u, t in d.tracks.items() if d.name(u) == "global instants"]
    got_instants = Counter(
        ((d.rank_of(i[0]) if i[0] not in global_track else None), (i[4], i[2]))
        for i in d.instants if i[4] not in OURS)
    # Kineto's two instants per file are global (`s: g`): on the one global track
    assert set(got_instants) == {(None, k) for _, k in want_instants}
    assert Counter({k: n for (_, k), n in got_instants.items()}) == \
        sum((Counter({k: n}) for (_, k), n in want_instants.items()), Counter())
    assert sum(got_instants.values()) == summary.trace_instants == 2 * len(files)

    procs = {t.process.process_name: list(t.process.process_labels) for t in d.tracks.values()
             if t.HasField("process")}
    assert procs == {f"rank {r}": ["python3", "CPU"] for r in range(8)}
    for rank, names in thread_names.items():
        assert names and names <= {d.name(u) for u, t in d.tracks.items()
                                   if t.HasField("thread") and d.rank_of(u) == rank}
    assert_no_stand_in_ids(d)


def _handmade(path: Path) -> Path:
    """Text ids everywhere, a counter with two series, instants of the three scopes."""
    ev = [
        {"ph": "M", "name": "process_name", "pid": "worker", "tid": 0, "args": {"name": "my worker"}},
        {"ph": "M", "name": "process_labels", "pid": "worker", "tid": 0, "args": {"labels": "CPU,env"}},
        {"ph": "M", "name": "thread_name", "pid": "worker", "tid": "main", "args": {"name": "main loop"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": "worker", "tid": "main", "ts": 110, "dur": 5},
        {"ph": "X", "cat": "python_function", "name": "torch/nn/x.py(1): f", "pid": "worker",
         "tid": "main", "ts": 100, "dur": 30},
        {"ph": "X", "cat": "python_function", "name": "train.py(9): step", "pid": "worker",
         "tid": "main", "ts": 90, "dur": 50},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": "helper", "tid": "io", "ts": 95, "dur": 5},
        {"ph": "C", "name": "queue", "pid": "worker", "ts": 100, "args": {"depth": 3, "bytes": 10}},
        {"ph": "C", "name": "queue", "pid": "worker", "ts": 120, "args": {"depth": 1, "bytes": 4}},
        {"ph": "i", "s": "t", "name": "mark", "pid": "worker", "tid": "main", "ts": 111, "args": {"k": [1, 2]}},
        {"ph": "i", "s": "p", "name": "proc mark", "pid": "worker", "tid": "main", "ts": 112},
        {"ph": "I", "s": "g", "name": "everyone", "pid": "", "tid": "", "ts": 113},
    ]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_text_ids_counters_and_instant_scopes(tmp_path):
    summary, d = export(_handmade(tmp_path / "t.json"), tmp_path)
    where = {s[3]: d.name(s[0]) for s in d.slices}
    assert where == {"aten::add": "main loop", "torch/nn/x.py(1): f": "main loop",
                     "train.py(9): step": "main loop", "aten::mul": "helper / io"}
    depth = {s[3]: s[5] for s in d.slices}  # frames and ops nest on one track
    assert (depth["train.py(9): step"], depth["torch/nn/x.py(1): f"], depth["aten::add"]) == (0, 1, 2)
    procs = [t.process for t in d.tracks.values() if t.HasField("process")]
    assert [(p.process_name, list(p.process_labels)) for p in procs] == [("my worker", ["CPU", "env"])]
    counters = {d.name(u): v for u, v in d.counters.items()}
    assert counters == {"queue depth": [(100_000, 3.0), (120_000, 1.0)],
                        "queue bytes": [(100_000, 10.0), (120_000, 4.0)]}
    assert summary.trace_counter_tracks == 2 and summary.trace_counter_samples == 4
    instants = {i[2]: (d.name(i[0]), i[3]) for i in d.instants}
    assert instants == {"mark": ("main loop", {"k": "[1,2]"}), "proc mark": ("my worker", {}),
                        "everyone": ("global instants", {})}
    assert_no_stand_in_ids(d)


@pytest.mark.parametrize("name", ["mi250_minitoy_rocm.json.gz", "v100_ddp_rank1.json.gz"])
def test_other_traces_keep_their_counts(name, tmp_path):
    path = DATA / "hta" / name
    complete, instants = source_counts(raw_events(path))
    _, d = export(path, tmp_path)
    assert Counter(s[4] for s in d.slices if s[4] not in OURS) == complete
    assert Counter((i[4], i[2]) for i in d.instants if i[4] not in OURS) == instants
    assert_no_stand_in_ids(d)
