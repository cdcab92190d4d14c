"""The performance log's two files agree whatever a write does: a failed append (disk full, a
refused rename, a short write) leaves both as they were, a torn JSONL tail a crash left is cut
off by the next append, and a `--log` that is a symlink is followed."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from goodhart_prof import perflog
from goodhart_prof.analysis import analyze
from goodhart_prof.errors import UserError
from goodhart_prof.trace.load import load
from tests.support.mounts import fill, small_disk
from tests.support.paths import DATA

MI250 = DATA / "hta" / "mi250_minitoy_rocm.json.gz"


@pytest.fixture(scope="module")
def measured():
    return perflog.measure(analyze(load(MI250)), MI250)


def _ids(log: Path) -> tuple[list, list]:
    """(ids in `log show` (the JSONL), ids in the markdown table), newest first."""
    return [r["id"] for r in perflog.read_rows(log)], perflog._markdown_ids(log.read_text())


def _state(log: Path) -> tuple[bytes, bytes]:
    return log.read_bytes(), perflog.jsonl_path(log).read_bytes()


def test_a_torn_jsonl_tail_is_cut_off_by_the_next_append(tmp_path, measured):
    log = tmp_path / "PERFLOG.md"
    perflog.append(measured, "first", log)
    twin = perflog.jsonl_path(log)
    whole = twin.read_bytes()
    with open(twin, "ab") as fh:  # what a crash half-way through an append leaves
        fh.write(b'{"id": 2, "date": "2026-11-23", "change": "cut sh')
    perflog.append(measured, "second", log)
    assert _ids(log) == ([2, 1], [2, 1])
    lines = twin.read_bytes().splitlines()
    assert twin.read_bytes().startswith(whole) and len(lines) == 2
    assert [json.loads(line)["change"] for line in lines] == ["first", "second"]


def test_a_whole_last_row_without_its_newline_is_kept(tmp_path, measured):
    log = tmp_path / "PERFLOG.md"
    perflog.append(measured, "first", log)
    twin = perflog.jsonl_path(log)
    twin.write_bytes(twin.read_bytes().rstrip(b"\n"))  # an edit by hand
    perflog.append(measured, "second", log)
    assert _ids(log) == ([2, 1], [2, 1])


def test_a_refused_rename_takes_the_jsonl_line_back(tmp_path, measured, monkeypatch):
    log = tmp_path / "PERFLOG.md"
    perflog.append(measured, "first", log)
    before = _state(log)

    def refuse(src, dst):
        raise OSError(28, "No space left on device", str(dst))
    with monkeypatch.context() as mp:
        mp.setattr(os, "replace", refuse)
        with pytest.raises(UserError, match=f"^{log}: cannot write: No space left on device$"):
            perflog.append(measured, "second", log)
    assert _state(log) == before
    perflog.append(measured, "third", log)
    assert _ids(log) == ([2, 1], [2, 1])


def test_a_short_write_then_disk_full_leaves_the_jsonl_as_it_was(tmp_path, measured, monkeypatch):
    """The kernel writes part of the line, then says the disk is full (in-process)."""
    log = tmp_path / "PERFLOG.md"
    perflog.append(measured, "first", log)
    before = _state(log)
    real_pwrite = os.pwrite

    def short_then_full(fd, data, offset):
        if len(data) > 10:
            return real_pwrite(fd, data[:10], offset)
        raise OSError(28, "No space left on device")
    with monkeypatch.context() as mp:
        mp.setattr(os, "pwrite", short_then_full)
        with pytest.raises(UserError, match="cannot write: No space left on device"):
            perflog.append(measured, "second", log)
    assert _state(log) == before
    perflog.append(measured, "third", log)
    assert _ids(log) == ([2, 1], [2, 1])


def test_disk_full_during_the_jsonl_append_then_space_again(tmp_path, measured):
    """The issue's case on a real 64 KiB tmpfs: the markdown's temporary file fits, the JSONL
    line does not (it crosses into a page the disk no longer has). Before the fix the torn line
    stayed and the next row was glued onto it: in the markdown, missing from `log show`."""
    with small_disk(tmp_path / "disk", "64k") as disk:
        if disk is None:
            pytest.skip("mount(2) is not allowed here (not root?): cannot make a full disk")
        log = disk / "PERFLOG.md"
        # A first row whose JSONL line ends 100 bytes short of a page boundary (each character
        # of the change is one byte of the line).
        perflog.append(measured, "x", log)
        change = "x" * (1 + 4096 - 100 - perflog.jsonl_path(log).stat().st_size)
        for p in (log, perflog.jsonl_path(log)):
            p.unlink()
        perflog.append(measured, change, log)
        assert perflog.jsonl_path(log).stat().st_size == 4096 - 100
        before = _state(log)
        row = {"id": 2, "date": perflog.read_rows(log)[0]["date"], "change": change, **measured}
        page = len(perflog.insert_row(log.read_text(), perflog.markdown_row(row)).encode())
        fill(disk, leave=-(-page // 4096) * 4096)  # room for the markdown's temporary file only
        with pytest.raises(UserError, match=f"^{log}: cannot write: No space left on device$"):
            perflog.append(measured, change, log)
        assert _state(log) == before and not [p for p in disk.iterdir() if ".tmp" in p.name]
        (disk / "filler").unlink()
        perflog.append(measured, "after the disk was freed", log)
        assert _ids(log) == ([2, 1], [2, 1])


def test_a_log_given_through_a_symlink_is_the_real_log(tmp_path, measured):
    real = tmp_path / "real" / "PERFLOG.md"
    real.parent.mkdir()
    perflog.append(measured, "first", real)
    link = tmp_path / "LOG.md"
    link.symlink_to(real)
    perflog.append(measured, "through the link", link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert _ids(real) == ([2, 1], [2, 1]) and _ids(link) == ([2, 1], [2, 1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LOG.md", "real"]
    assert sorted(p.name for p in real.parent.iterdir()) == ["PERFLOG.jsonl", "PERFLOG.md",
                                                             "PERFLOG.md.lock"]
