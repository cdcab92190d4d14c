"""goodhart_prof/trace/tables.py: decoded events -> the events table and the Python frames. Rows
sorted by start, 2021 category spellings renamed, GPU columns (device, stream, bytes) on GPU rows
only, what a cuda_sync event waits on on its rows only, the 2021 `external id`, op labels, malformed GPU ids and unfit times skipped and counted,
torch's own frames dropped; ranks from `rank <r>` process names and set by pid; tables stacked."""
from __future__ import annotations

import json

import numpy as np
import pytest

from goodhart_prof.trace.columns import new_ids, text_id
from goodhart_prof.trace.decode import decode
from goodhart_prof.trace.memory_table import memory_table
from goodhart_prof.trace.tables import assign_ranks, concat_tables, events_table, frame_keep, rank_processes


def _table(events):
    return events_table(decode(json.dumps({"traceEvents": events}).encode())[0])


def _gpu(cat, name, ts, pid=0, tid=7, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": 2,
            "args": {"device": 0, "stream": 7, **args}}


def test_the_events_table_of_a_2021_trace():
    table, frames, skipped, unfit = _table([
        _gpu("Kernel", "k", 30, tid="stream 7", correlation=4, **{"external id": 9}),
        _gpu("Memcpy", "m", 20, device=1, stream=8, bytes=4096),
        {"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 100, "tid": 100, "ts": 10, "dur": 30,
         "args": {"External id": 9, "bytes": 5, "Input type": ["float", "float"], "Input Dims": [[2, 3], [3, 4]],
                  "flops": 48}},
    ])
    assert (len(frames), skipped, unfit) == (0, 0, 0)
    assert table["name"].astype(str).tolist() == ["aten::mm", "m", "k"]  # by start
    assert table["cat"].astype(str).tolist() == ["cpu_op", "gpu_memcpy", "kernel"]
    assert table["device"].tolist() == [-1, 1, 0] and table["stream"].tolist() == [-1, 8, 7]
    assert np.isnan(table["bytes"].iloc[0]) and table["bytes"].iloc[1] == 4096  # bytes on GPU rows only
    assert table["external_id"].tolist() == [9, -1, 9] and table["correlation"].tolist() == [-1, -1, 4]
    assert table["end"].tolist() == [40.0, 22.0, 32.0] and table["flops"].iloc[0] == 48
    assert (table["input_types"].iloc[0], table["input_dims"].iloc[0]) == ("float, float", "2x3, 3x4")


def test_what_a_cuda_sync_event_waits_on():
    # read on cuda_sync rows only: a kernel carrying the args keeps -1; text digits are read as
    # every int column reads them; an absent arg (Context Sync) is -1
    sync = {"ph": "X", "cat": "cuda_sync", "pid": 0, "tid": 8, "dur": 2}
    table, _, skipped, _ = _table([
        {**sync, "name": "Stream Wait Event", "ts": 1,
         "args": {"stream": 8, "correlation": 3, "wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": 2}},
        {**sync, "name": "Event Sync", "ts": 2,
         "args": {"correlation": 6, "wait_on_stream": "8", "wait_on_cuda_event_record_corr_id": 5}},
        {**sync, "name": "Context Sync", "ts": 3, "args": {"correlation": 7}},
        _gpu("kernel", "k", 4, correlation=4, wait_on_stream=7, wait_on_cuda_event_record_corr_id=2)])
    assert skipped == 0
    assert table["wait_on_stream"].tolist() == [7, 8, -1, -1]
    assert table["wait_on_correlation"].tolist() == [2, 5, -1, -1]
    assert table["stream"].tolist() == [-1, -1, -1, 7]  # a sync event's stream is not a GPU row's


def test_malformed_gpu_ids_and_unfit_times_are_skipped_and_counted():
    table, _, skipped, unfit = _table([
        _gpu("kernel", "ok", 1), _gpu("kernel", "negative device", 2, device=-3),
        _gpu("kernel", "stream beyond int64", 3, stream=2**64),
        {"ph": "X", "cat": "cpu_op", "name": "far", "pid": 1, "tid": 1, "ts": 1e17, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "no time", "pid": 1, "tid": 1, "dur": 1}])
    assert table["name"].astype(str).tolist() == ["ok"]
    assert (skipped, unfit) == (4, 1)


def test_python_frames_apart_without_torchs_own():
    frame = {"ph": "X", "cat": "python_function", "pid": 100, "tid": 100, "dur": 40}
    table, frames, _, _ = _table([
        {**frame, "name": "torch/nn/modules/module.py(1): _call_impl", "ts": 9},
        {**frame, "name": "<built-in method item>", "ts": 9},
        {**frame, "name": "torch/nn/utils/clip_grad.py(5): clip", "ts": 9},  # KEPT_TORCH_FRAMES
        {**frame, "name": "train.py(3): step", "ts": 8, "args": {"Python id": 3, "Python parent id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 100, "ts": 10, "dur": 1}])
    assert table["name"].astype(str).tolist() == ["aten::mm"]
    assert frames["name"].tolist() == ["torch/nn/utils/clip_grad.py(5): clip", "train.py(3): step"]
    assert frames["python_id"].tolist() == [-1, 3] and frames["end"].tolist() == [49.0, 48.0]
    names = np.array(["torch/x.py(1): f", "a.py(2): g", "<built-in method all>"], dtype=object)
    assert frame_keep(names, np.array([0, 1, 2, 1])).tolist() == [1, 3]


def test_ranks_from_process_names_set_by_pid():
    events = [{"ph": "M", "name": "process_name", "pid": 5, "args": {"name": "Rank_4"}},
              {"ph": "M", "name": "process_name", "pid": "Spans", "args": {"name": "rank 3"}},
              {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "rank three"}},
              {"ph": "M", "name": "thread_name", "pid": 8, "args": {"name": "rank 1"}},
              {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 5, "tid": 1, "ts": 1, "dur": 1},
              {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 7, "tid": 1, "ts": 2, "dur": 1},
              {"ph": "i", "name": "[memory]", "pid": 5, "tid": 1, "ts": 3, "args": {"Bytes": 8}}]
    doc = decode(json.dumps({"traceEvents": events}).encode())[0]
    ids = new_ids()
    pid_rank = rank_processes(doc, ids)
    assert pid_rank == {5: 4, text_id("Spans"): 3}
    table, frames, _, _ = events_table(doc, ids)
    memory = memory_table(doc, ids)
    assign_ranks(table, frames, pid_rank, default_rank=0, memory=memory)
    assert table["rank"].tolist() == [4, 0] and memory["rank"].tolist() == [4]  # pid 7 names no rank
    assign_ranks(table, frames, {}, default_rank=2, memory=memory)
    assert table["rank"].tolist() == [2, 2] and memory["rank"].tolist() == [2]


def test_stacked_tables_union_their_names_and_sort_by_rank_then_time():
    a = _table([{"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": t, "dur": 1}
                for n, t in (("x", 5), ("y", 1))])[0]
    b = _table([_gpu("kernel", "k", 3)])[0]
    a["rank"] = np.int32(1)
    out = concat_tables([a, b])
    assert out["name"].astype(str).tolist() == ["k", "y", "x"] and out["rank"].tolist() == [0, 1, 1]
    assert set(out["name"].cat.categories) == {"x", "y", "k"} and out.columns.tolist() == a.columns.tolist()
    assert concat_tables([a, b], sort=False)["name"].astype(str).tolist() == ["y", "x", "k"]


@pytest.mark.xfail(strict=True, reason="a GPU event without a device or stream arg is dropped as malformed: "
                                       "the absent default -1 reads as a negative id (BAD_ID)")
def test_a_gpu_event_without_device_or_stream_takes_its_pid_and_tid():
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 3, "tid": "stream 9", "ts": 1, "dur": 2}
    table, _, skipped, _ = _table([kernel])
    assert skipped == 0 and table["device"].tolist() == [3] and table["stream"].tolist() == [9]


def test_a_trace_with_both_spellings_of_a_category():
    table, _, _, _ = _table([_gpu("Kernel", "a", 1), _gpu("kernel", "b", 2), _gpu("Memcpy", "c", 3)])
    assert table["cat"].astype(str).tolist() == ["kernel", "kernel", "gpu_memcpy"]
    assert list(table["cat"].cat.categories).count("kernel") == 1
