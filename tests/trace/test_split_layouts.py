"""A document's figures never depend on how a big file was cut into pieces: hostile layouts
(a list of event-like objects after the events, string thread ids on both sides of a cut, a
duplicated top-level key) load the same decoded whole, in streamed pieces and in parallel byte
ranges. The cut sizes are forced small (`PIECE_BYTES`, `TAIL_GUARD`) so these files stay small."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import goodhart_prof.trace.load as loader
import goodhart_prof.trace.pieces as cutter
from goodhart_prof.trace.load import TraceError, load


def kernel(i: int, tid=7) -> dict:
    return {"ph": "X", "cat": "kernel", "name": f"k{i % 3}", "pid": 0, "tid": tid, "ts": 10.0 * i + 3,
            "dur": 2, "args": {"device": 0, "stream": 7, "correlation": i}}


def op(i: int, tid, name: str = "aten::item") -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": 10.0 * i,
            "dur": 5.0, "args": {"External id": i}}


def write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def in_pieces(monkeypatch, path: Path, parts: int) -> None:
    """Cut `path` into about `parts` pieces (no tail guard: cuts may land anywhere)."""
    monkeypatch.setattr(loader, "PIECE_BYTES", path.stat().st_size // parts + 1)
    monkeypatch.setattr(cutter, "TAIL_GUARD", 0)


def same_events(a, b) -> None:
    assert len(a.events) == len(b.events)
    assert a.events.equals(b.events)
    assert a.frames.columns.keys() == b.frames.columns.keys()
    assert a.memory.equals(b.memory)
    assert (a.ranks, a.device_properties, a.skipped_events) == (b.ranks, b.device_properties, b.skipped_events)


@pytest.mark.parametrize("layout", ["top_level_list", "inside_other_data"])
def test_a_list_after_the_events_is_never_read_as_events(tmp_path, monkeypatch, layout):
    events = [op(i, 1, "aten::mm") for i in range(400)] + [kernel(i) for i in range(400)]
    trailer = [kernel(10_000 + i) for i in range(3000)]  # event-like objects that are not events
    doc = {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "GPU 0"}]}
    if layout == "top_level_list":
        doc["otherList"] = trailer
    else:
        doc["otherData"] = {"note": "}, {", "list": trailer}
    path = write(tmp_path / "trailer.json", doc)
    whole = load(path, workers=1)
    assert len(whole.events) == 800 and whole.device_properties[0][0]["name"] == "GPU 0"
    for parts in (2, 3, 7):
        in_pieces(monkeypatch, path, parts)
        for workers in (1, 2):
            same_events(load(path, workers=workers), whole)


def test_string_thread_ids_are_the_same_threads_in_every_piece(tmp_path, monkeypatch):
    """Thread "main" holds a `rollout` annotation; thread "worker" the `.item()` calls, in the
    second half of the file: in pieces they must stay apart, as decoded whole."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "rollout", "pid": 1, "tid": "main",
               "ts": 0.0, "dur": 1e9}]
    events += [op(i, "main", "aten::mm") for i in range(1, 600)]
    events += [op(i, "worker") for i in range(600, 1200)]
    path = write(tmp_path / "threads.json", {"traceEvents": events})
    whole = load(path, workers=1)
    ev = whole.events
    main_tid = ev.loc[ev["name"] == "rollout", "tid"].iloc[0]
    assert set(ev.loc[ev["name"] == "aten::item", "tid"]) != {main_tid}
    for parts in (2, 3, 7):
        in_pieces(monkeypatch, path, parts)
        for workers in (1, 2):
            split = load(path, workers=workers)
            same_events(split, whole)
            items = split.events[split.events["name"] == "aten::item"]
            assert len(items) == 600 and (items["tid"] != main_tid).all()


@pytest.mark.parametrize("key", ["traceEvents", "deviceProperties", "schemaVersion"])
@pytest.mark.parametrize("parts", [1, 2, 7])
def test_a_duplicated_top_level_key_is_refused_at_any_size(tmp_path, monkeypatch, key, parts):
    events = [op(i, 1, "aten::mm") for i in range(800)]
    body = json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0}], "traceEvents": events})
    dup = {"traceEvents": [op(9999, 1)], "deviceProperties": [{"id": 1}], "schemaVersion": 2}[key]
    path = tmp_path / "dup.json"
    path.write_text(body[:-1] + f', "{key}": {json.dumps(dup)}}}')
    if parts > 1:
        in_pieces(monkeypatch, path, parts)
    with pytest.raises(TraceError) as err:
        load(path, workers=2)
    assert err.value.format_message() == f'{path}: duplicated top-level key "{key}"'
