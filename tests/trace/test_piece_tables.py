"""goodhart_prof/trace/piece_tables.py: `Piece`, the one result of every decode path. The native decoder
(columnar.py) and the msgspec decode (ranges.py `tables_of`) fill it alike on one document: its
events and frames, the ranks its process names state, what was skipped (and how much of that did
not fit the clock), how many events it decoded, its memory events and its header."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from goodhart_prof.trace import columnar
from goodhart_prof.trace.decode import decode
from goodhart_prof.trace.piece_tables import Piece
from goodhart_prof.trace.ranges import tables_of

EVENTS = [
    {"ph": "M", "name": "process_name", "pid": 5, "tid": 0, "args": {"name": "rank 2"}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 5, "tid": 1, "ts": 10, "dur": 5},
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 12, "dur": 2, "args": {"device": 0, "stream": 7}},
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 13, "dur": 2, "args": {"device": -3, "stream": 7}},
    {"ph": "X", "cat": "python_function", "name": "train.py(10): step", "pid": 5, "tid": 1, "ts": 9, "dur": 8},
    {"ph": "X", "cat": "cpu_op", "name": "far", "pid": 5, "tid": 1, "ts": 1e17, "dur": 5},
    {"ph": "i", "name": "[memory]", "pid": 5, "tid": 1, "ts": 11, "s": "t",
     "args": {"Bytes": 64, "Device Type": 1, "Device Id": 0}},
]
RAW = json.dumps({"traceEvents": EVENTS, "distributedInfo": {"rank": 2}}).encode()


def _check(piece: Piece) -> None:
    assert isinstance(piece, Piece)
    assert piece.table["name"].astype(str).tolist() == ["aten::mm", "k"] and len(piece.frames) == 1
    assert piece.pid_rank == {5: 2} and piece.header.distributedInfo.rank == 2
    assert piece.skipped == 2 and piece.unfit == 1  # the negative device; the time past 2^53 us
    assert piece.decoded == len(EVENTS) and piece.memory["bytes"].tolist() == [64.0]


def test_the_msgspec_decode_fills_a_piece():
    _check(tables_of(*decode(RAW)))


@pytest.mark.skipif(not columnar.AVAILABLE, reason="the native decoder is not built here")
def test_the_native_decoder_fills_the_same_piece():
    native, typed = columnar.document_tables(RAW), tables_of(*decode(RAW))
    _check(native)
    pd.testing.assert_frame_equal(native.table, typed.table, check_exact=True)
    pd.testing.assert_frame_equal(native.memory, typed.memory, check_exact=True)
