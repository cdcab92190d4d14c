"""The ranks' traces merged in a process of its own (goodhart_prof/capture/merging.py): the merged
file is trace/merge.py's, a bad rank file is one line naming it, and where the reading side is not
installed the launcher is told so instead of failing."""
from __future__ import annotations

import gzip
import json

import pytest

from goodhart_prof.capture.merging import MergeUnavailable, merge_apart
from goodhart_prof.errors import UserError
from tests.support.blocked_imports import blocking_folder


def _rank_trace(path, pid: int, base_ns: int) -> None:
    doc = {"baseTimeNanoseconds": base_ns, "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": pid, "ts": 100.0, "dur": 5.0},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 102.0, "dur": 3.0,
         "args": {"device": 0, "stream": 7, "correlation": 11}}]}
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)


def _two_ranks(tmp_path):
    files = {r: tmp_path / f"rank-{r}.pt.trace.json.gz" for r in (0, 1)}
    _rank_trace(files[0], 4242, 1_000_000_000)
    _rank_trace(files[1], 4343, 1_000_002_000)  # 2 us later
    return files


def test_the_child_writes_the_merged_trace(tmp_path):
    out = tmp_path / "merged_trace.json"
    merge_apart(_two_ranks(tmp_path), out)
    merged = json.loads(out.read_text())
    assert merged["goodhartProf"]["merged_ranks"] == [0, 1]
    ops = {e["pid"]: e["ts"] for e in merged["traceEvents"] if e.get("name") == "aten::mm"}
    assert ops == {0: 100.0, 1: 102.0}  # rank 1 shifted onto rank 0's base time
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merged_trace.json", "rank-0.pt.trace.json.gz",
                                                          "rank-1.pt.trace.json.gz"]  # no temp file left


def test_a_broken_rank_file_is_one_line_naming_it(tmp_path):
    files = _two_ranks(tmp_path)
    files[1].write_bytes(b"\x1f\x8b not a gzip stream")
    with pytest.raises(UserError) as caught:
        merge_apart(files, tmp_path / "merged_trace.json")
    message = caught.value.format_message()
    assert "rank-1.pt.trace.json.gz" in message and "\n" not in message
    assert not (tmp_path / "merged_trace.json").exists()


def test_without_the_reading_side_the_launcher_is_told_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(blocking_folder(tmp_path / "hook", ("msgspec",))))
    with pytest.raises(MergeUnavailable) as caught:
        merge_apart(_two_ranks(tmp_path), tmp_path / "merged_trace.json")
    assert caught.value.module == "msgspec"
    assert not (tmp_path / "merged_trace.json").exists()
