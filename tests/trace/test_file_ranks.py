"""goodhart_prof/trace/file_ranks.py: which files a path stands for (`trace_files`: per-rank files
over a merged one, unusable entries warned for or refused), the rank a file name states, how
distributedInfo, process names and file names are weighed (`rank_evidence`), and the header's
rank and world size checked."""
from __future__ import annotations

from pathlib import Path

import pytest

from goodhart_prof.errors import TraceError
from goodhart_prof.trace.decode import DistributedInfo, TraceDoc
from goodhart_prof.trace.file_ranks import (file_name_rank, header_rank, rank_evidence, trace_files,
                                            world_size)

SKIPPED = "(the other ranks are analysed; --strict stops instead)"


def _folder(tmp_path, *names) -> Path:
    folder = tmp_path / "run"
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_text("{}")
    return folder


def test_a_folders_rank_files_win_over_its_merged_trace(tmp_path):
    folder = _folder(tmp_path, "rank1.json.gz", "rank0.json", "merged_trace.json", "run.json", "notes.txt")
    assert [p.name for p in trace_files(folder)] == ["rank0.json", "rank1.json.gz"]
    alone = _folder(tmp_path / "b", "merged_trace.json", "run.json")
    assert [p.name for p in trace_files(alone)] == ["merged_trace.json"]
    assert trace_files(folder / "rank0.json") == [folder / "rank0.json"]


def test_an_entry_that_is_no_file_is_warned_for_or_refused_under_strict(tmp_path):
    folder = _folder(tmp_path, "rank0.json")
    (folder / "rank1.json").symlink_to(tmp_path / "gone.json")
    (folder / "rank2.json").mkdir()
    warnings: list[str] = []
    assert [p.name for p in trace_files(folder, warnings=warnings)] == ["rank0.json"]
    assert warnings == [f"skipped rank file rank1.json: a dangling symbolic link (to {tmp_path / 'gone.json'}) "
                        f"{SKIPPED}", f"skipped rank file rank2.json: a folder, not a trace file {SKIPPED}"]
    with pytest.raises(TraceError, match=r"rank1\.json: a dangling symbolic link"):
        trace_files(folder, strict=True)


@pytest.mark.parametrize("names, message", [
    ((), "folder holds no trace files (*.json, *.json.gz)"),
    (("notes.txt", "run.json"), "folder holds no trace files (*.json, *.json.gz)"),
])
def test_a_folder_with_no_trace_is_an_error(tmp_path, names, message):
    folder = _folder(tmp_path, *names)
    with pytest.raises(TraceError) as info:
        trace_files(folder)
    assert info.value.format_message() == f"{folder}: {message}"


def test_a_missing_path_and_a_link_loop_say_what_they_are(tmp_path):
    with pytest.raises(TraceError) as info:
        trace_files(tmp_path / "nothing")
    assert info.value.format_message() == f"{tmp_path / 'nothing'}: no such file or folder"
    (tmp_path / "loop.json").symlink_to("loop.json")
    with pytest.raises(TraceError) as info:
        trace_files(tmp_path / "loop.json")
    assert info.value.format_message() == f"{tmp_path / 'loop.json'}: a symbolic link loop"


@pytest.mark.parametrize("name, rank", [
    ("rank-3.pt.trace.json.gz", 3), ("sampled_rank-1.json.gz", 1), ("v100_ddp_rank1.json.gz", 1),
    ("RANK_7.json", 7), ("rank1_rank1.json", 1), ("worker0_step_12.json", None),
    ("rank1_rank2.json", None), ("frank3.json", None), ("rank_1234567890.json", None)])
def test_the_rank_a_file_name_states(name, rank):
    assert file_name_rank(Path(name)) == rank


@pytest.mark.parametrize("name, info, pids, result, warning", [
    ("rank2.json", 2, {}, (2, {}), None),
    ("rank3.json", 2, {}, (2, {}), "rank evidence conflicts in rank3.json: distributedInfo.rank 2, file name "
                                   "rank 3; using distributedInfo.rank"),
    ("t.json", 5, {10: 0, 11: 1}, (None, {10: 0, 11: 1}),
     "rank evidence conflicts in t.json: distributedInfo.rank 5, process names rank 0/rank 1; using the "
     "process names"),
    ("t.json", 1, {10: 1}, (1, {}), None),  # distributedInfo agreeing with the process names
    ("rank4.json", None, {10: 0}, (None, {10: 0}),
     "rank evidence conflicts in rank4.json: process names rank 0, file name rank 4; using the process names"),
    ("rank4.json", None, {}, (None, {}), None),  # the file name alone: settled later (`ranks_of_many`)
])
def test_rank_evidence_weighs_the_sources(name, info, pids, result, warning):
    warnings: list[str] = []
    assert rank_evidence(Path(name), info, pids, warnings) == result
    assert warnings == ([warning] if warning else [])


def test_the_headers_rank_and_world_size_are_checked():
    def header(rank=None, size=None):
        return TraceDoc(traceEvents=[], distributedInfo=DistributedInfo(rank=rank, world_size=size))
    warnings: list[str] = []
    assert header_rank(Path("t.json"), header(3, 8), warnings) == 3 and world_size(header(3, 8)) == 8
    assert header_rank(Path("t.json"), header(-1), warnings) is None
    assert header_rank(Path("t.json"), header(10**30), warnings) is None
    assert warnings == ["t.json: ignored distributedInfo.rank -1 (not a rank)",
                        "t.json: ignored distributedInfo.rank 100000000000000000000... (not a rank)"]
    assert world_size(header(size=0)) is None and world_size(TraceDoc(traceEvents=[])) is None
    assert header_rank(Path("t.json"), TraceDoc(traceEvents=[]), warnings) is None
