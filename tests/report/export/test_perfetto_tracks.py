"""report/export/perfetto_tracks.py: the tracks of the Perfetto export and their names. Names and
sort indexes from a hand-made trace's metadata events, the text of string thread ids, each loaded
event's track key (a GPU-side annotation on its stream), the layout's process/thread/GPU/overflow
tracks, and ids kept as the trace wrote them unless two threads would share one."""
from __future__ import annotations

import pytest

from goodhart_prof.report.export.perfetto_tracks import (SYNTHETIC_ID_BASE, Layout, Metadata, RankOf,
                                                         file_ranks, loaded_keys, metadata, text_ids)
from goodhart_prof.trace.extra_events import read_extras
from tests.support.events import X, kernel, load_events, op


def M(what: str, pid: int, tid: int = 0, **args) -> dict:
    return {"ph": "M", "name": what, "pid": pid, "tid": tid, "args": args}


@pytest.fixture
def traced(tmp_path):
    """Process 100 (`python3`, labels, sort index 3; its main thread named), threads 100, 200 and
    the text id `worker`; process 300 (`Spans`, labelled); a kernel and a GPU-side annotation on
    GPU pid 0 / stream 7."""
    events = [M("process_name", 100, name="python3"), M("process_labels", 100, labels="trainer, rank0 "),
              M("process_sort_index", 100, sort_index=3), M("thread_name", 100, 100, name="MainThread"),
              M("thread_sort_index", 100, 200, sort_index="x"),  # not an int: ignored
              M("process_name", 300, name="Spans"), M("process_labels", 300, labels="PyTorch Profiler"),
              op("aten::mm", 10, 5), op("aten::add", 20, 5, tid=200),
              X("span", "user_annotation", 30, 5, pid=300, tid=5),
              X("w", "cpu_op", 40, 5, pid=100, tid="worker"),
              kernel("k", 50, 10, 1), X("gpu ann", "gpu_user_annotation", 50, 10, pid=0, tid=7)]
    trace = load_events(tmp_path, events)
    return trace, [read_extras(p) for p in trace.paths]


def test_metadata_names_labels_and_sort_indexes(traced):
    trace, extras = traced
    ranks = file_ranks(trace, extras)
    assert ranks == [0]
    meta = metadata(extras, RankOf(trace, extras, ranks))
    assert meta.process_name == {(0, 100): "python3", (0, 300): "Spans"}
    assert meta.process_labels == {(0, 100): ["trainer", "rank0"], (0, 300): ["PyTorch Profiler"]}
    assert meta.process_sort == {(0, 100): 3}
    assert meta.thread_name == {(0, 100, 100): "MainThread"} and meta.thread_sort == {}


def test_text_ids_and_track_keys(traced):
    trace, extras = traced
    ev = trace.events
    _, tid_text = text_ids(ev, extras)
    stand_in = int(ev.loc[ev["name"] == "w", "tid"].iloc[0])
    assert stand_in < -1 and tid_text == {(0, 100, stand_in): "worker"}
    codes, combos = loaded_keys(ev)
    key = dict(zip(ev["name"].astype(str), (combos[c] for c in codes)))
    assert key["aten::mm"] == (False, 0, 100, 100) and key["span"] == (False, 0, 300, 5)
    assert key["k"] == key["gpu ann"] == (True, 0, 0, 7)  # (gpu, rank, device, stream)


def test_layout_names_threads_and_keeps_unique_ids():
    meta = Metadata(process_name={(0, 100): "python3", (0, 300): "Spans"},
                    process_labels={(0, 100): ["trainer"], (0, 300): ["PyTorch Profiler"]},
                    process_sort={(0, 100): 3}, thread_name={(0, 100, 100): "MainThread"})
    layout = Layout([0], [(0, 100, 100), (0, 100, 200), (0, 300, 5), (0, 100, "worker"), (0, 300, 200)],
                    {0: 100}, meta, by_rank=False)
    process = layout.process[0]
    assert (process.name, process.labels, process.sort_index, process.pid) == ("python3", ["trainer"], 3, 100)
    main = layout.thread(0, 100, 100)
    assert (main.name, main.pid, main.tid) == ("MainThread", 100, 100)
    assert layout.thread(0, 300, 5).name == "Spans (PyTorch Profiler) / thread 5"
    assert layout.thread(0, 300, 5).tid == 5  # used once: kept
    assert layout.thread(0, 100, "worker").name == "worker"
    # tid 200 is in two processes: neither keeps it
    shared = layout.thread(0, 100, 200), layout.thread(0, 300, 200)
    assert [t.name for t in shared] == ["thread 200", "Spans (PyTorch Profiler) / thread 200"]
    assert all(t.tid >= SYNTHETIC_ID_BASE for t in shared) and shared[0].tid != shared[1].tid
    assert layout.thread(0, 100, 100) is main  # one track per thread


def test_gpu_and_overflow_tracks():
    layout = Layout([0], [(0, 100, 100)], {0: 100}, Metadata(), by_rank=False)
    assert layout.process[0].name == "rank 0"  # no process_name: the rank
    gpu = layout.gpu(0, 0, 7)
    assert (gpu.name, gpu.kind, gpu.parent) == ("GPU 0 stream 7", "gpu", layout.process[0].uuid)
    assert layout.lane(gpu, 0) == gpu.uuid
    second = layout.lane(gpu, 2)  # makes lanes 1 and 2
    assert [t.name for t in layout.tracks[-2:]] == ["GPU 0 stream 7 (overlap 1)", "GPU 0 stream 7 (overlap 2)"]
    assert second == gpu.overflow[1] and layout.lane(gpu, 1) == gpu.overflow[0] and len(gpu.overflow) == 2
    assert layout.global_track() is layout.global_track()


def test_ranks_by_number_with_their_names_as_labels():
    meta = Metadata(process_name={(0, 100): "python3", (1, 100): "rank 1"})
    layout = Layout([0, 1], [(0, 100, 100), (1, 100, 100)], {0: 100, 1: 100}, meta, by_rank=True)
    assert [(t.name, t.labels) for t in layout.tracks[:2]] == [("rank 0", ["python3"]), ("rank 1", [])]
    # pid 100 on both ranks: neither keeps it
    assert {layout.process[0].pid, layout.process[1].pid} == {SYNTHETIC_ID_BASE, SYNTHETIC_ID_BASE + 1}
