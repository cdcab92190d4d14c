"""A gzip trace decoded while it inflates (goodhart_prof/trace/stream.py) gives exactly what
decoding the whole document gives, and falls back to that whenever a piece cannot stand alone."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from goodhart_prof.trace import stream
from goodhart_prof.trace.decode import DecodeError, Complete, decode, gunzip
from goodhart_prof.trace.load import load

DATA = Path(__file__).parent / "data"
V100 = DATA / "hta" / "v100_ddp_rank1.json.gz"


def whole(data: bytes):
    return decode(gunzip(data, 1 << 32))


def pieces_made(monkeypatch) -> list[int]:
    """Record how many pieces each pipelined decode made."""
    made: list[int] = []
    real = stream._decode_pieces

    def counting(chunks):
        docs = real(chunks)
        made.append(len(docs))
        return docs
    monkeypatch.setattr(stream, "_decode_pieces", counting)
    return made


def test_real_trace_in_pieces_equals_whole(monkeypatch):
    made = pieces_made(monkeypatch)
    data = V100.read_bytes()
    doc, skipped = stream.decode_gzip(data)
    ref, ref_skipped = whole(data)
    assert made == [7]  # 54 MB in 8 MB pieces
    assert (skipped, ref_skipped) == (0, 0)
    assert len(doc.traceEvents) == len(ref.traceEvents) == 216_092
    assert doc.traceEvents == ref.traceEvents
    assert doc.deviceProperties == ref.deviceProperties and doc.deviceProperties
    assert doc.distributedInfo == ref.distributedInfo and doc.distributedInfo.rank == 1
    assert doc.baseTimeNanoseconds == ref.baseTimeNanoseconds


def small_trace(n: int, extra: dict | None = None, name=lambda i: f"op{i}") -> dict:
    events = [{"ph": "X", "cat": "cpu_op", "name": name(i), "pid": 1, "tid": 2, "ts": i * 10,
               "dur": 5, "args": {"External id": i}} for i in range(n)]
    doc = {"deviceProperties": [{"id": 0, "name": "A"}, {"id": 1, "name": "B"}],
           "distributedInfo": {"rank": 3}, "traceEvents": events}
    doc.update(extra or {})
    return doc


@pytest.fixture
def tiny_pieces(monkeypatch):
    """Pieces of ~2 KB from chunks of 512 bytes, so hand-written traces are cut many times."""
    monkeypatch.setattr(stream, "PIECE_BYTES", 2048)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 512)
    return pieces_made(monkeypatch)


def test_header_after_events_kept(tiny_pieces):
    data = gzip.compress(json.dumps(small_trace(400, {"baseTimeNanoseconds": 1234})).encode())
    doc, skipped = stream.decode_gzip(data)
    assert tiny_pieces and tiny_pieces[0] > 10
    assert skipped == 0
    assert [e.name for e in doc.traceEvents] == [f"op{i}" for i in range(400)]
    assert doc.baseTimeNanoseconds == 1234 and doc.distributedInfo.rank == 3
    assert [d["name"] for d in doc.deviceProperties] == ["A", "B"]


def test_cut_inside_a_string_falls_back(tiny_pieces):
    # Every name holds the boundary pattern, so some cuts land inside a string.
    trace = small_trace(300, name=lambda i: f"op{i}" + "}, {" * 40)
    data = gzip.compress(json.dumps(trace).encode())
    doc, skipped = stream.decode_gzip(data)
    ref, _ = whole(data)
    assert doc.traceEvents == ref.traceEvents and len(doc.traceEvents) == 300
    assert skipped == 0


def test_malformed_event_counts_like_whole_decode(tiny_pieces):
    trace = small_trace(300)
    trace["traceEvents"][150]["ts"] = {"not": "a number"}
    data = gzip.compress(json.dumps(trace).encode())
    doc, skipped = stream.decode_gzip(data)
    ref, ref_skipped = whole(data)
    assert tiny_pieces == []  # the piece with the bad event did not decode: whole document
    assert (skipped, ref_skipped) == (1, 1)
    assert len(doc.traceEvents) == 299 and doc.traceEvents == ref.traceEvents


def test_nan_document_read_like_whole_decode(tiny_pieces):
    text = json.dumps(small_trace(300)).replace('"dur": 5,', '"dur": NaN,', 1)
    data = gzip.compress(text.encode())
    doc, _ = stream.decode_gzip(data)
    assert tiny_pieces == []
    first = next(e for e in doc.traceEvents if isinstance(e, Complete))
    assert first.dur is None and len(doc.traceEvents) == 300


def test_truncated_gzip_is_a_decode_error(tiny_pieces):
    data = gzip.compress(json.dumps(small_trace(300)).encode())
    with pytest.raises(DecodeError, match="truncated or corrupt gzip data"):
        stream.decode_gzip(data[: len(data) // 2])


def test_gzip_bomb_stops(monkeypatch, tiny_pieces):
    monkeypatch.setattr(stream, "gunzip_limit", lambda compressed: 10_000)
    data = gzip.compress(json.dumps(small_trace(2000)).encode())
    with pytest.raises(DecodeError, match="expands past"):
        stream.decode_gzip(data)


def test_loader_streams_small_gzip_files(monkeypatch):
    made = pieces_made(monkeypatch)
    trace = load(V100, progress=False)
    assert made == [7]
    assert len(trace.events) == 123_379 and trace.ranks == [1]
