"""The Perfetto export's packets (goodhart_prof/report/export/perfetto_packets.py): chunks of packets
make one trace whatever the chunk size, timestamps go in time order, and a trace event's args
become debug annotations of the right kind."""
from __future__ import annotations

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace as PerfettoTrace
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

from goodhart_prof.analysis import analyze
from goodhart_prof.report.export import perfetto_packets
from goodhart_prof.report.export.perfetto import write_perfetto
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

MI250 = DATA / "hta" / "mi250_minitoy_rocm.json.gz"


def _packets(path):
    trace = PerfettoTrace()
    trace.ParseFromString(path.read_bytes())
    return list(trace.packet)


def test_small_chunks_write_the_same_packets(tmp_path, monkeypatch):
    a = analyze(load(MI250, progress=False))
    whole = write_perfetto(a, tmp_path / "whole.pftrace")
    monkeypatch.setattr(perfetto_packets, "CHUNK_PACKETS", 7)
    chunked = write_perfetto(a, tmp_path / "chunked.pftrace")
    one, many = _packets(whole.path), _packets(chunked.path)
    assert len(one) == len(many) > 7 * 10  # many chunks, each its own Trace message
    assert [p.SerializeToString() for p in one] == [p.SerializeToString() for p in many]
    events = [p for p in one if p.HasField("track_event")]
    times = [p.timestamp for p in events]
    assert times == sorted(times)  # descriptors first, then events in time order
    assert all(p.HasField("track_descriptor") for p in one[: len(one) - len(events)])
    assert one[0].sequence_flags == 1  # SEQ_INCREMENTAL_STATE_CLEARED starts the sequence


def _annotations(args: bytes) -> dict:
    te = TrackEvent()
    perfetto_packets.annotate_args(te, args)
    return {a.name: a.WhichOneof("value") + "=" + str(getattr(a, a.WhichOneof("value"))) for a in te.debug_annotations}


def test_args_become_typed_debug_annotations():
    got = _annotations(b'{"n": 3, "x": 1.5, "s": "hi", "b": true, "l": [1, 2], "big": 18446744073709551616}')
    assert got == {"n": "int_value=3", "x": "double_value=1.5", "s": "string_value=hi",
                   "b": "string_value=true", "l": "string_value=[1,2]",
                   "big": "double_value=1.8446744073709552e+19"}


def test_args_that_are_not_an_object_add_nothing():
    assert _annotations(b"") == {}
    assert _annotations(b"[1, 2]") == {}
    assert _annotations(b"{not json") == {}
