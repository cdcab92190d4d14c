"""goodhart_prof/trace/memory_table.py: the `[memory]` instants of a decoded document as the memory
table (document order, odd arg values read as absent, times that do not fit dropped), the empty
table's dtypes, and memory tables stacked in (rank, ts) order."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from goodhart_prof.trace.columns import text_id
from goodhart_prof.trace.decode import decode
from goodhart_prof.trace.memory_table import concat_memory, memory_table
from goodhart_prof.trace.model import empty_memory
from goodhart_prof.trace.model import MEMORY_COLUMNS


def _memory(ts, pid=1, **args):
    return {"ph": "i", "name": "[memory]", "pid": pid, "tid": 2, "ts": ts, "s": "t", "args": args}


def _table(events) -> pd.DataFrame:
    doc, _ = decode(json.dumps({"traceEvents": events}).encode())
    return memory_table(doc)


def test_memory_instants_in_document_order_with_their_args():
    table = _table([
        _memory(30, **{"Device Type": 1, "Device Id": 0, "Bytes": 512, "Addr": 1000,
                       "Total Allocated": 512, "Total Reserved": 2048}),
        _memory(10, **{"Device Type": 1, "Device Id": 0, "Bytes": -512, "Addr": 1000,
                       "Total Allocated": 0, "Total Reserved": 2048}),
        {"ph": "i", "name": "another instant", "pid": 1, "tid": 2, "ts": 5},
        {"ph": "X", "name": "[memory]", "pid": 1, "tid": 2, "ts": 5, "dur": 1},  # not an instant
    ])
    assert list(table.columns) == list(MEMORY_COLUMNS)
    assert table["ts"].tolist() == [30.0, 10.0] and table["bytes"].tolist() == [512.0, -512.0]
    assert table["total_allocated"].tolist() == [512.0, 0.0] and table["total_reserved"].tolist() == [2048.0] * 2
    assert table["addr"].tolist() == [1000, 1000] and table["device"].tolist() == [0, 0]
    assert table["device_type"].tolist() == [1, 1] and table["rank"].tolist() == [0, 0]


def test_odd_values_read_as_absent_and_a_text_pid_gets_its_id():
    table = _table([_memory(20, pid="Spans", **{"Device Id": 2**32, "Bytes": "lots", "Addr": None,
                                                "Total Allocated": [1]})])
    row = table.iloc[0]
    assert row["pid"] == text_id("Spans") and row["device"] == 2**32  # never wraps onto GPU 0
    assert np.isnan(row["bytes"]) and np.isnan(row["total_allocated"]) and np.isnan(row["total_reserved"])
    assert row["addr"] == -1 and row["device_type"] == -1


def test_times_that_do_not_fit_are_dropped():
    doc, _ = decode(b'{"traceEvents": [{"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": NaN},'
                    b'{"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1e17},'
                    b'{"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 7}]}')
    assert memory_table(doc)["ts"].tolist() == [7.0]
    assert len(_table([_memory(2.0**60)])) == 0


def test_no_memory_events_is_the_empty_table():
    table = _table([{"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": 1, "dur": 1}])
    empty = empty_memory()
    assert len(table) == 0 and list(table.columns) == list(MEMORY_COLUMNS)
    assert table.dtypes.to_dict() == empty.dtypes.to_dict()
    assert empty["device"].dtype == np.int64 and empty["rank"].dtype == np.int32


def test_stacked_tables_sort_by_rank_then_time_keeping_ties_in_order():
    a = _table([_memory(30, **{"Bytes": 1}), _memory(10, **{"Bytes": 2})])
    b = _table([_memory(10, **{"Bytes": 3}), _memory(5, **{"Bytes": 4})])
    a["rank"] = np.int32(1)
    stacked = concat_memory([a, empty_memory(), b])
    assert stacked[["rank", "ts", "bytes"]].values.tolist() == [[0, 5, 4], [0, 10, 3], [1, 10, 2], [1, 30, 1]]
    assert concat_memory([a, b], sort=False)["bytes"].tolist() == [1, 2, 3, 4]
    assert len(concat_memory([])) == 0
