"""One trace file loaded (goodhart_prof/trace/file_result.py): what `load_rank_file` says about the
file before the files of a trace are assembled: its rank, the ranks a merged file holds, its
tables, and an empty memory table of the documented columns when it records no memory."""
from __future__ import annotations

import gzip
import json

from goodhart_prof.trace.file_result import FileResult
from goodhart_prof.trace.load import load_rank_file
from goodhart_prof.trace.model import MEMORY_COLUMNS
from tests.support.paths import DATA


def _raw(path):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def test_a_rank_file_says_its_rank_and_its_events():
    path = DATA / "hta" / "v100_ddp_rank1.json.gz"
    result = load_rank_file(path, default_rank=7)
    assert isinstance(result, FileResult)
    doc = _raw(path)
    assert result.rank == doc["distributedInfo"]["rank"] == 1
    assert result.world_size == doc["distributedInfo"]["world_size"]
    complete = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    assert len(result.table) + result.skipped == len(complete)
    assert result.merged_ranks == []  # a rank's own file names no `rank <r>` processes
    assert len(result.device_properties) == len(doc["deviceProperties"])


def test_a_merged_file_names_its_ranks():
    result = load_rank_file(DATA / "ours" / "cpu_2rank_merged.json.gz", default_rank=0)
    assert result.merged_ranks == [0, 1]


def test_a_file_without_memory_events_has_an_empty_memory_table(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}))
    result = load_rank_file(path, default_rank=3)
    assert result.rank is None and result.world_size is None and result.skipped == 0
    assert len(result.table) == 1
    assert tuple(result.memory.columns) == MEMORY_COLUMNS and result.memory.empty
