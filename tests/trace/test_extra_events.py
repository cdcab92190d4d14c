"""goodhart_prof/trace/extra_events.py: `read_extras`, the events the tables leave out (python
frames, instants, counters, metadata, complete events with text ids), read again for the export:
what each kind keeps, what is skipped and counted, and the same result from a gzip file or from a
document read piece by piece."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

import goodhart_prof.trace.extra_events as extra_events
import goodhart_prof.trace.pieces as pieces
from goodhart_prof.trace.decode import DecodeError
from goodhart_prof.trace.extra_events import read_extras

EVENTS = [
    {"ph": "X", "cat": "python_function", "name": "f", "pid": 1, "tid": 2, "ts": 10, "dur": 5},
    {"ph": "X", "cat": "python_function", "name": "g", "pid": 1, "tid": 2, "ts": 12, "dur": -3},
    {"ph": "X", "cat": "python_function", "name": "h", "pid": 1, "tid": "3", "ts": "soon", "dur": 1},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 1, "dur": 1},
    {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
     "ts": 0, "dur": 100},
    {"ph": "i", "cat": "marker", "name": "boom", "pid": 1, "tid": 2, "ts": 20, "s": "g", "args": {"why": "x"}},
    {"ph": "I", "name": "old", "pid": 1, "tid": 2, "ts": 21},
    {"ph": "i", "name": "no time", "pid": 1, "tid": 2},
    {"ph": "C", "name": "mem", "pid": 1, "id": 4, "ts": 30, "args": {"a": 1, "b": "x", "c": 2.5}},
    {"ph": "C", "name": "mem", "pid": 1, "ts": 31, "args": [1]},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "main"}},
    {"ph": "Q", "name": "another tool's phase"},
]


def _write(path, events, **header):
    data = json.dumps({"traceEvents": events, **header}).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def test_each_kind_of_left_out_event_is_kept_as_the_trace_wrote_it(tmp_path):
    extras = read_extras(_write(tmp_path / "t.json", EVENTS, distributedInfo={"rank": 5}))
    assert extras.threads == [(1, 2)] and extras.distributed_rank == 5
    # python frames: a negative duration is an instant; "soon" is no time (skipped)
    assert extras.py_count() == 2 and [extras.names[k] for k in extras.py_name] == ["f", "g"]
    assert extras.py_ts.tolist() == [10.0, 12.0] and extras.py_dur.tolist() == [5.0, 0.0]
    names = extras.names
    assert [(names[n], names[c], scope, ts, args) for _, n, c, scope, ts, args in extras.instants] == [
        ("boom", "marker", "g", 20.0, b'{"why": "x"}'), ("old", "", "t", 21.0, b"")]
    assert extras.counters == [(1, "mem", 4, 30.0, {"a": 1.0, "c": 2.5})]  # the text series left out
    assert extras.metadata == [("thread_name", 1, 2, {"name": "main"})]
    assert extras.odd_complete == [(0.0, "PyTorch Profiler (0)", "Spans", "PyTorch Profiler")]
    assert extras.skipped == 3  # the python frame at "soon", the instant with no time, the list counter


def test_an_empty_trace_has_no_extras(tmp_path):
    extras = read_extras(_write(tmp_path / "t.json", []))
    assert extras.py_count() == 0 and extras.py_thread.dtype == np.int32
    assert (extras.instants, extras.counters, extras.metadata, extras.skipped) == ([], [], [], 0)
    assert extras.distributed_rank is None


def test_a_gzip_file_and_a_document_read_piece_by_piece_give_the_same_extras(tmp_path, monkeypatch):
    events = [dict(e, ts=e["ts"] + 1000 * i) if isinstance(e.get("ts"), int) else e
              for i in range(40) for e in EVENTS]
    whole = read_extras(_write(tmp_path / "t.json", events, distributedInfo={"rank": 2}))
    zipped = read_extras(_write(tmp_path / "t.json.gz", events, distributedInfo={"rank": 2}))
    monkeypatch.setattr(extra_events, "PIECE_BYTES", 2000)
    monkeypatch.setattr(pieces, "TAIL_GUARD", 100)
    cut = read_extras(tmp_path / "t.json")
    handed = pieces.stream_pieces(pieces.plain_chunks(tmp_path / "t.json"), 2000, lambda raw, header: header)
    assert handed.count(False) > 5  # at this size the document really is read in pieces
    assert whole.py_count() == 80 and whole.skipped == 120 and len(whole.instants) == 80
    for other in (zipped, cut):
        assert other.threads == whole.threads and other.names == whole.names
        assert other.py_ts.tolist() == whole.py_ts.tolist() and other.py_dur.tolist() == whole.py_dur.tolist()
        assert (other.instants, other.counters, other.metadata, other.odd_complete) == \
            (whole.instants, whole.counters, whole.metadata, whole.odd_complete)
        assert (other.skipped, other.distributed_rank) == (120, 2)


def test_a_file_that_cannot_be_read_is_a_decode_error(tmp_path):
    with pytest.raises(DecodeError, match="^cannot be read"):
        read_extras(tmp_path / "gone.json")
    (tmp_path / "bad.json").write_text('{"traceEvents": [{"ph": "X"')
    with pytest.raises(DecodeError, match="^not valid JSON"):
        read_extras(tmp_path / "bad.json")
