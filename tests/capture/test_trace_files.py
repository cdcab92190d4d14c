"""The trace writer: export in the loop, compression in a child process, errors brought back."""
from __future__ import annotations

import gzip
import json
import pytest
import torch

from goodhart_prof.capture.trace_files import (GZIP_LEVEL, check_gzip_written, start_write, trace_name,
                                               traced_iterations, write_profiler_trace)
from goodhart_prof.fileio import WriteError


def _profiler():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with torch.profiler.record_function("ProfilerStep#7"):
            torch.ones(8).mul(2).sum()
    return prof


def test_the_child_writes_a_whole_gzip_and_leaves_no_temporary(tmp_path):
    target = tmp_path / trace_name(3)
    pending = start_write(_profiler(), target)
    assert pending.json_tmp.parent == tmp_path and pending.json_tmp.name.startswith(".rank-3.pt.trace")
    pending.wait()
    assert pending.done()
    doc = json.loads(gzip.decompress(target.read_bytes()))
    names = {e.get("name") for e in doc["traceEvents"]}
    assert {"ProfilerStep#7", "aten::mul", "aten::sum"} <= names
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]  # the JSON is gone
    assert traced_iterations(target) == [7]
    size = len(gzip.decompress(target.read_bytes()))
    check_gzip_written(target, size)  # the trailer holds the JSON's size
    with pytest.raises(OSError, match="holds"):
        check_gzip_written(target, size + 1)
    assert GZIP_LEVEL == 6


def test_a_failure_in_the_child_is_the_writes_one_line_error(tmp_path):
    target = tmp_path / trace_name(0)
    pending = start_write(_profiler(), target)
    target.mkdir()  # the child's rename into place now fails, as root too
    with pytest.raises(WriteError) as info:
        pending.wait()
    assert str(info.value) == f"{target}: cannot write: Is a directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]  # no JSON, no gzip temporary


def test_write_profiler_trace_waits_for_the_file(tmp_path):
    target = tmp_path / "sub" / trace_name(0)  # a missing folder is made
    write_profiler_trace(_profiler(), target)
    assert traced_iterations(target) == [7]
