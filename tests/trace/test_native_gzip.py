"""goodhart_prof/trace/native_gzip.py: a gzip document parsed natively while it is inflated gives
the tables the msgspec way gives, with the header from its head and tail; a file it should not
take (not gzip, outside its size range, a BOM, bigger than its trailer says) is None, for the
loader's other ways."""
from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from goodhart_prof.trace import columnar, native_gzip
from goodhart_prof.trace.decode import decode
from goodhart_prof.trace.tables import events_table

pytestmark = pytest.mark.skipif(not columnar.AVAILABLE, reason="the native decoder is not built here")


def _events(n: int) -> list[dict]:
    """n events alternating a cpu op on thread 100 and a kernel on GPU 0's stream 7."""
    return [{"ph": "X", "cat": "kernel", "name": f"k{i % 7}", "pid": 0, "tid": 7, "ts": 10.0 * i, "dur": 5.0,
             "args": {"device": 0, "stream": 7, "correlation": i}} if i % 2 else
            {"ph": "X", "cat": "cpu_op", "name": f"op{i % 5}", "pid": 100, "tid": 100, "ts": 10.0 * i, "dur": 8.0}
            for i in range(n)]


@pytest.fixture
def small_steps(monkeypatch):
    """This module's way for small documents too, inflated a few KB at a time."""
    monkeypatch.setattr(columnar, "PARALLEL_BYTES", 1)
    monkeypatch.setattr(native_gzip, "CHUNK_BYTES", 4 << 10)
    monkeypatch.setattr(native_gzip, "TAIL_BYTES", 1 << 10)


def test_the_document_read_while_inflated_equals_the_msgspec_tables(tmp_path, small_steps):
    doc = json.dumps({"traceEvents": _events(2000), "distributedInfo": {"rank": 3, "world_size": 4},
                      "baseTimeNanoseconds": 5}).encode()
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(doc))
    piece = native_gzip.document(path)
    expected, _, skipped, _ = events_table(decode(doc)[0])
    assert piece is not None and piece.skipped == skipped == 0 and piece.decoded == 2000
    pd.testing.assert_frame_equal(piece.table, expected, check_exact=True)
    assert piece.table["ts"].tolist() == [10.0 * i for i in range(2000)]
    assert (piece.header.distributedInfo.rank, piece.header.distributedInfo.world_size) == (3, 4)
    assert piece.header.baseTimeNanoseconds == 5


def test_files_for_the_other_ways_are_none(tmp_path, small_steps, monkeypatch):
    doc = json.dumps({"traceEvents": _events(2000)}).encode()
    plain = tmp_path / "plain.json"
    plain.write_bytes(doc)
    bom = tmp_path / "bom.json.gz"
    bom.write_bytes(gzip.compress(b"\xef\xbb\xbf" + doc))
    two = tmp_path / "two.json.gz"  # the trailer gives the last member's size only: a quarter
    two.write_bytes(gzip.compress(doc[:len(doc) * 3 // 4]) + gzip.compress(doc[len(doc) * 3 // 4:]))
    assert native_gzip.document(plain) is None and native_gzip.document(bom) is None
    assert native_gzip.document(tmp_path / "gone.json.gz") is None
    assert len(native_gzip.document(two).table) == 2000  # two members are fine ...
    monkeypatch.setattr(native_gzip, "PIECE_BYTES", len(doc) // 2)
    assert native_gzip.document(two) is None  # ... but past PIECE_BYTES: the piece-by-piece way


def test_a_document_below_the_parallel_size_is_none(tmp_path):
    path = tmp_path / "small.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": _events(10)}).encode()))
    assert native_gzip.document(path) is None  # whole-document decoding is cheaper there


@pytest.mark.parametrize("part_bytes", [10 << 10, 40 << 10])
def test_parts_parsed_while_inflating_join_to_the_same_tables(tmp_path, small_steps, monkeypatch, part_bytes):
    """Parts cut as the inflating reaches them (8 at most), each parsed on a pool thread: their
    codes and rows joined equal the one-pass tables, whatever the number of parts."""
    doc = json.dumps({"traceEvents": _events(3000), "baseTimeNanoseconds": 5}).encode()  # ~360 KB
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(doc))
    monkeypatch.setattr(native_gzip, "PART_BYTES", part_bytes)
    joined = []
    real = columnar.join
    monkeypatch.setattr(columnar, "join", lambda *parts: joined.append(len(parts)) or real(*parts))
    piece = native_gzip.document(path)
    expected = events_table(decode(doc)[0])[0]
    pd.testing.assert_frame_equal(piece.table, expected, check_exact=True)
    assert joined == [min(8, len(doc) // part_bytes)]
