"""goodhart_prof/trace/model.py: the loaded trace's helpers. A merged trace's GPU thread ids, the
`comm_args` labels split into columns, rows picked by category or by name pattern, the (rank, ts)
order check, python frames stacked in order, and a `Trace`'s devices and its narrowing to one
rank or device (CPU events and host memory stay)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from goodhart_prof.trace.model import (Frames, comm_arg_table, in_categories, is_sorted, merged_gpu_tid,
                                       name_codes, rows_named)
from tests.support.events import X, kernel, load_events, op


def test_merged_gpu_tid():
    assert merged_gpu_tid(0, 7) == 1_000_000_007 and merged_gpu_tid(3, 20) == 1_000_003_020


def test_comm_args_split_into_columns():
    table = comm_arg_table(pd.Index(["allreduce|2873320|2873320|8|BFloat16|0", "|||||", "too|few"]))
    assert table.iloc[0].tolist() == ["allreduce", 2873320.0, 2873320.0, 8.0, "BFloat16", "0"]
    for i in (1, 2):  # blank fields, or a label of the wrong shape: all absent
        row = table.iloc[i]
        assert row[["collective", "dtype", "process_group"]].tolist() == [None, None, None]
        assert row[["in_nelems", "out_nelems", "group_size"]].isna().all()
    assert list(comm_arg_table(pd.Index([])).columns) == ["collective", "in_nelems", "out_nelems",
                                                         "group_size", "dtype", "process_group"]


def test_in_categories_agrees_with_a_plain_membership_test():
    values = ["a", "b", None, "c", "d", "e", "f", "a", "g"]
    column = pd.Series(values, dtype="category")
    for wanted in (["a"], ["a", "c", "zz"], ["a", "b", "c", "d", "e", "f"]):  # few codes, and many
        assert in_categories(column, wanted).tolist() == [v in wanted for v in values]


def test_rows_by_name_pattern_and_category(tmp_path):
    trace = load_events(tmp_path, [op("aten::mm", 0, 10), kernel("gemm_a", 20, 5, 1),
                                   op("aten::mm_out", 30, 10), kernel("my_gemm", 40, 5, 2)])
    events = trace.events
    names = list(events["name"].cat.categories)
    assert sorted(names[c] for c in name_codes(events, re.compile("aten::mm"))) == ["aten::mm", "aten::mm_out"]
    assert sorted(names[c] for c in name_codes(events, re.compile("gemm"), search=True)) == ["gemm_a", "my_gemm"]
    at = rows_named(events, re.compile("gemm|aten::mm$"), cats=("kernel",), search=True)
    assert events["name"].iloc[at].astype(str).tolist() == ["gemm_a", "my_gemm"]
    assert len(rows_named(events, re.compile("nothing"))) == 0


def test_is_sorted_by_rank_then_time():
    assert is_sorted(np.array([0, 0, 1, 1]), np.array([1.0, 2.0, 0.5, 0.5]))
    assert not is_sorted(np.array([0, 0]), np.array([2.0, 1.0]))
    assert not is_sorted(np.array([1, 0]), np.array([1.0, 2.0]))
    assert is_sorted(np.array([0]), np.array([5.0])) and is_sorted(np.array([]), np.array([]))


def test_frames_stack_in_rank_then_time_order():
    def frames(rank, ts, name):
        cols = {c: np.array([0] * len(ts), dtype=np.int64) for c in ("pid", "tid", "python_id", "python_parent_id")}
        ts = np.array(ts, dtype=float)
        return Frames({**cols, "rank": np.array([rank] * len(ts), dtype=np.int32), "ts": ts, "dur": np.ones(len(ts)),
                       "end": ts + 1, "name": np.array(name, dtype=object)})
    stacked = Frames.concat([frames(1, [5.0, 1.0], ["b", "a"]), Frames.empty(), frames(0, [9.0], ["c"])])
    assert len(stacked) == 3 and stacked["name"].tolist() == ["c", "a", "b"] and stacked["rank"].tolist() == [0, 1, 1]
    assert Frames.concat([frames(1, [5.0, 1.0], ["b", "a"])], sort=False)["name"].tolist() == ["b", "a"]
    assert len(Frames.concat([])) == 0


def _memory(ts, device_type, device):
    return {"ph": "i", "name": "[memory]", "pid": 100, "tid": 100, "ts": ts, "s": "t",
            "args": {"Device Type": device_type, "Device Id": device, "Bytes": 64}}


def test_a_traces_devices_and_one_device_selected(tmp_path):
    events = [op("aten::mm", 0, 10), kernel("k0", 20, 5, 1),
              X("k1", "kernel", 30, 5, pid=1, tid=9, device=1, stream=9, correlation=2),
              _memory(1, 0, -1), _memory(2, 1, 0), _memory(3, 1, 1)]
    trace = load_events(tmp_path, events)
    assert trace.devices == [(0, 0), (0, 1)]
    one = trace.select(device=1)
    assert one.events["name"].astype(str).tolist() == ["aten::mm", "k1"]  # the CPU op stays
    assert one.memory["ts"].tolist() == [1.0, 3.0]  # the host's memory stays with the rank
    assert one.devices == [(0, 1)] and trace.select(rank=0).devices == [(0, 0), (0, 1)]
    nothing = trace.select(rank=5)
    assert len(nothing.events) == 0 and nothing.ranks == [] and nothing.devices == []
