"""Finding runs to read (goodhart_prof/trace/run_folders.py): complete runs in order, the last two
`diff` compares, `latest` (a symlink or a text file), and what a name on the command line means."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from goodhart_prof.capture import runs
from goodhart_prof.errors import UserError
from goodhart_prof.trace import run_folders
from tests.support.runs import make_run


# -- choosing runs ---------------------------------------------------------------------------------
def test_runs_are_ordered_by_created_and_unfinished_ones_are_skipped(tmp_path):
    make_run(tmp_path, "zz-oldest", "2026-11-23T09:00:00+0000")
    make_run(tmp_path, "aa-newest", "2026-11-23T12:00:00+0000")
    make_run(tmp_path, "mm-middle", "2026-11-23T13:00:00+0200")  # 11:00 UTC
    make_run(tmp_path, "killed", None, record=False)              # no run.json: still running or killed
    make_run(tmp_path, "stopped", "2026-11-23T14:00:00+0000", interrupted={"signal": "SIGINT", "at_iteration": 3})
    make_run(tmp_path, "untraced", "2026-11-23T14:00:00+0000", trace=None)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text("{not json")
    (tmp_path / "notes.txt").write_text("a file beside the runs")
    assert [r.name for r in run_folders.complete_runs(tmp_path)] == ["zz-oldest", "mm-middle", "aa-newest"]
    older, newer = run_folders.last_two(tmp_path)
    assert (older.name, newer.name) == ("mm-middle", "aa-newest")
    assert newer.describe() == f"{tmp_path / 'aa-newest'} (2026-11-23T12:00:00+0000)"


def test_same_second_is_ordered_by_the_record_written_last(tmp_path):
    same = "2026-11-23T12:00:00+0000"
    a, b = make_run(tmp_path, "b-first", same), make_run(tmp_path, "a-second", same)
    os.utime(a / "run.json", ns=(1_000_000_000, 1_000_000_000))
    os.utime(b / "run.json", ns=(2_000_000_000, 2_000_000_000))
    assert [r.name for r in run_folders.complete_runs(tmp_path)] == ["b-first", "a-second"]


def test_a_missing_created_falls_back_to_the_folder_time(tmp_path):
    old, new = make_run(tmp_path, "z-old", None), make_run(tmp_path, "a-new", "not a date")
    os.utime(old, (1_000, 1_000))
    os.utime(new, (2_000, 2_000))
    assert [r.name for r in run_folders.complete_runs(tmp_path)] == ["z-old", "a-new"]


def test_fewer_than_two_runs_is_one_line(tmp_path):
    with pytest.raises(UserError, match=r"no complete run; diff with no arguments compares the last two"):
        run_folders.last_two(tmp_path / "nothing-here")
    make_run(tmp_path, "only", "2026-11-23T12:00:00+0000")
    make_run(tmp_path, "half", None, record=False)
    with pytest.raises(UserError, match=r"one complete run \(.*only\); diff with no arguments"):
        run_folders.last_two(tmp_path)


def test_latest_is_a_symlink_replaced_in_place(tmp_path):
    a = make_run(tmp_path, "a", "2026-11-23T12:00:00+0000")
    b = make_run(tmp_path, "b", "2026-11-23T12:01:00+0000")
    assert runs.point_latest(tmp_path, a) == "symlink"
    assert os.readlink(tmp_path / "latest") == "a"  # relative: the root can move
    assert runs.point_latest(tmp_path, b) == "symlink"
    assert os.readlink(tmp_path / "latest") == "b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "latest"]  # no temporary left
    assert run_folders.latest_run(tmp_path).folder == b
    assert [r.name for r in run_folders.complete_runs(tmp_path)] == ["a", "b"]  # latest is not a run


def test_latest_without_symlinks_is_a_text_file(tmp_path, monkeypatch):
    """A filesystem that refuses symlinks (FAT, some network mounts) answers EPERM."""
    a = make_run(tmp_path, "a", "2026-11-23T12:00:00+0000")
    make_run(tmp_path, "b", "2026-11-23T12:01:00+0000")

    def refuse(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "symlink", refuse)
    assert runs.point_latest(tmp_path, a) == "file"
    assert (tmp_path / "latest").read_text() == "a\n"
    assert run_folders.latest_run(tmp_path).folder == a  # the pointer wins over the scan
    assert run_folders.resolve(str(tmp_path / "latest"), tmp_path) == a
    assert run_folders.resolve("latest", tmp_path) == a


def test_latest_that_names_a_removed_run_falls_back_to_the_newest(tmp_path):
    make_run(tmp_path, "a", "2026-11-23T12:00:00+0000")
    b = make_run(tmp_path, "b", "2026-11-23T12:01:00+0000")
    (tmp_path / "latest").write_text("deleted\n")
    assert run_folders.latest_run(tmp_path).folder == b
    with pytest.raises(UserError, match="no complete run"):
        run_folders.latest_run(tmp_path / "empty")


def test_arguments_resolve_to_paths_then_run_names(tmp_path, monkeypatch):
    root = tmp_path / "traces"
    run = make_run(root, "clean", "2026-11-23T12:00:00+0000")
    trace = tmp_path / "elsewhere.json"
    trace.write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert run_folders.resolve(str(trace), root) == trace            # a path is taken as it is
    assert run_folders.resolve("traces/clean", root) == Path("traces/clean")
    assert run_folders.resolve("clean", root) == root / "clean" == run  # a run name under the root
    with pytest.raises(UserError, match=r"^nope: no such trace file or folder, nor a run named so under"):
        run_folders.resolve("nope", root)
