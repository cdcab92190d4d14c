"""goodhart_prof/trace/native_ranges.py: a plain file's events read natively in windows. Each
window is cut after its last `}, {` (`last_cut`); the windows' tables, in order, are the msgspec
way's; an event longer than a window, or a file that is not the one stat'ed, stops it."""
from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from goodhart_prof.trace import columnar, native_ranges
from goodhart_prof.trace.decode import decode
from goodhart_prof.trace.file_bytes import FileChanged
from goodhart_prof.trace.frame import events_end, events_start
from goodhart_prof.trace.native_ranges import file_events, last_cut
from goodhart_prof.trace.tables import concat_tables, events_table

native = pytest.mark.skipif(not columnar.AVAILABLE, reason="the native decoder is not built here")


def test_last_cut_is_the_last_boundary_between_two_events():
    buf = b'[{"a": 1}, {"b": 2} ,\n {"c": 3}]'
    assert last_cut(buf, len(buf)) == (buf.rindex(b"}", 0, 22), buf.index(b'{"c"'))
    assert last_cut(buf, 12) == (8, 11)  # only buf[:12] is looked at
    assert last_cut(b'[{"a": 1}]', 10) is None
    far = b'[{"a": 1}, {"b": "' + b"x" * 100_000 + b'"}]'  # the end's 64 KB hold none: more is searched
    assert last_cut(far, len(far)) == (8, 11)


def _doc(n: int) -> bytes:
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 9}", "pid": 100, "tid": 100 + i % 2,
               "ts": 5.0 * i, "dur": 3.0} for i in range(n)]
    return json.dumps({"traceEvents": events, "distributedInfo": {"rank": 1}}).encode()


def _frame(doc: bytes) -> tuple[int, int]:
    start = events_start(doc)
    return start, events_end(doc, start - 1)


@native
def test_the_windows_tables_in_order_are_the_msgspec_tables(tmp_path, monkeypatch):
    doc = _doc(3000)
    path = tmp_path / "t.json"
    path.write_bytes(doc)
    monkeypatch.setattr(native_ranges, "WINDOW_BYTES", len(doc) // 7)
    start, end = _frame(doc)
    pieces = file_events(path, os.stat(path), start, end)
    assert pieces is not None and len(pieces) >= 7
    expected = events_table(decode(doc)[0])[0]
    got = concat_tables([p.table for p in pieces], sort=False)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), expected, check_exact=True)
    assert sum(p.decoded for p in pieces) == 3000


@native
def test_an_event_longer_than_a_window_hands_the_file_back(tmp_path, monkeypatch):
    doc = json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x" * 5000, "pid": 1, "tid": 1,
                                       "ts": 1.0, "dur": 1.0}] * 3}).encode()
    path = tmp_path / "t.json"
    path.write_bytes(doc)
    monkeypatch.setattr(native_ranges, "WINDOW_BYTES", 1000)
    assert file_events(path, os.stat(path), *_frame(doc)) is None


@native
def test_a_file_that_is_not_the_one_stated_has_changed(tmp_path):
    doc = _doc(10)
    path = tmp_path / "t.json"
    path.write_bytes(doc)
    before = os.stat(path)
    path.write_bytes(doc + b"\n")
    with pytest.raises(FileChanged, match=rf"^changed while being read \({len(doc):,} bytes when opened, "):
        file_events(path, before, *_frame(doc))
