"""The performance log's two files: concurrent appends lose nothing, rows are newest first and
text already in the log is kept, bad input is one line (exit 2), and the two files agree
whatever a write does: a failed append (disk full, a refused rename, a short write) leaves both
as they were, a torn JSONL tail a crash left is cut off by the next append, and a `--log` that
is a symlink is followed."""
from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.errors import UserError
from goodhart_prof.perflog.log_file import (HEADER, OLD_HEADER, OLD_SEPARATOR, SEPARATOR, TITLE, append,
                                            insert_row, jsonl_path, markdown_ids, markdown_row, read_rows,
                                            row_cells)
from goodhart_prof.perflog.measure import measure
from goodhart_prof.trace.load import load
from tests.support.helpers import clean_env, run_main
from tests.support.mounts import fill, small_disk
from tests.support.paths import DATA
from tests.support.perflog_tables import jsonl, measured, one_line_error, table

MI250 = DATA / "hta" / "mi250_minitoy_rocm.json.gz"


# -- concurrent writers ----------------------------------------------------------------------------
def _writer(log: str, who: int, rows: int, barrier) -> None:
    barrier.wait()
    for j in range(rows):
        append(measured(iteration_ms=float(who * 100 + j)), f"writer {who} | row {j}", log)


def check_consistent(log: Path, expected_changes: set[str]) -> None:
    rows, records = table(log), jsonl(log)
    ids = [int(r[0]) for r in rows]
    assert len(rows) == len(records) == len(expected_changes)
    assert ids == sorted(ids, reverse=True) == list(range(len(rows), 0, -1))  # newest first, no gaps
    assert [r["id"] for r in records] == list(range(1, len(records) + 1))  # append order
    assert {r["change"] for r in records} == expected_changes
    assert {r[2].replace("\\|", "|") for r in rows} == expected_changes
    by_id = {r["id"]: r for r in records}
    for row in rows:  # the markdown row and the JSON row with the same id agree
        assert row[2].replace("\\|", "|") == by_id[int(row[0])]["change"]


def test_concurrent_appends_lose_no_row(tmp_path):
    log = tmp_path / "PERFLOG.md"
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    writers, rows = 6, 5
    barrier = context.Barrier(writers)
    procs = [context.Process(target=_writer, args=(str(log), i, rows, barrier)) for i in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * writers
    check_consistent(log, {f"writer {i} | row {j}" for i in range(writers) for j in range(rows)})
    # Each writer's own rows keep their order (ids increase with its j).
    seen = defaultdict(list)
    for r in jsonl(log):
        seen[int(r["change"].split()[1])].append(r["iteration_ms"])
    assert all(v == sorted(v) for v in seen.values())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["PERFLOG.jsonl", "PERFLOG.md"]  # no lock file


def test_concurrent_cli_adds(tmp_path):
    log = tmp_path / "PERFLOG.md"
    log.write_text("# Notes on this project\n\nSome text that must survive.\n")
    procs = [subprocess.Popen([sys.executable, "-m", "goodhart_prof.cli", "log", "add", str(MI250),
                               "--change", f"cli {i}", "--log", str(log)], env=clean_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(6)]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, results
    assert all("added to" in out for out, _ in results)
    check_consistent(log, {f"cli {i}" for i in range(6)})
    text = log.read_text()
    assert text.startswith("# Notes on this project\n\nSome text that must survive.\n")
    assert text.count(TITLE) == 1


# -- the table -------------------------------------------------------------------------------------
def test_newest_first_and_existing_text_kept(tmp_path):
    log = tmp_path / "notes.md"
    log.write_text("# Optimisation notes\n\n| other | table |\n|---|---|\n| a | b |\n")
    for i in range(3):
        append(measured(), f"change {i}", log)
    assert [r[2] for r in table(log)] == ["change 2", "change 1", "change 0"]
    assert log.read_text().startswith("# Optimisation notes\n\n| other | table |\n|---|---|\n| a | b |\n")
    assert jsonl_path(log).name == "notes.jsonl"
    assert [r["change"] for r in read_rows(log)] == ["change 2", "change 1", "change 0"]


def test_a_twin_torn_inside_a_utf8_character_still_reads(tmp_path):
    log = tmp_path / "PERFLOG.md"
    twin = jsonl_path(log)
    twin.write_bytes(b'{"id": 1, "change": "a"}\n{"id": 2, "change": "\xc3')
    assert [r["id"] for r in read_rows(log)] == [1]


# -- bad input -------------------------------------------------------------------------------------
def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    log = tmp_path / "PERFLOG.md"
    one_line_error(*run_main(["log", "show", "--log", str(log)], capsys)[::2], "no performance log rows")
    one_line_error(*run_main(["log", "add", str(tmp_path / "missing.json"), "--change", "x", "--log", str(log)],
                             capsys)[::2], "missing.json")
    assert not log.exists() and not jsonl_path(log).exists()
    append(measured(), "only row", log)
    one_line_error(*run_main(["log", "add", str(MI250), "--change", "  ", "--log", str(log)], capsys)[::2],
                   "--change")
    one_line_error(*run_main(["log", "add", str(MI250), "--log", str(log)], capsys)[::2], "--change")
    assert len(jsonl(log)) == 1 and len(table(log)) == 1


# -- failed and torn writes ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mi250_figures():
    return measure(analyze(load(MI250)), MI250)


def _ids(log: Path) -> tuple[list, list]:
    """(ids in `log show` (the JSONL), ids in the markdown table), newest first."""
    return [r["id"] for r in read_rows(log)], markdown_ids(log.read_text())


def _state(log: Path) -> tuple[bytes, bytes]:
    return log.read_bytes(), jsonl_path(log).read_bytes()


def test_a_torn_jsonl_tail_is_cut_off_by_the_next_append(tmp_path, mi250_figures):
    log = tmp_path / "PERFLOG.md"
    append(mi250_figures, "first", log)
    twin = jsonl_path(log)
    whole = twin.read_bytes()
    with open(twin, "ab") as fh:  # what a crash half-way through an append leaves
        fh.write(b'{"id": 2, "date": "2026-11-23", "change": "cut sh')
    append(mi250_figures, "second", log)
    assert _ids(log) == ([2, 1], [2, 1])
    lines = twin.read_bytes().splitlines()
    assert twin.read_bytes().startswith(whole) and len(lines) == 2
    assert [json.loads(line)["change"] for line in lines] == ["first", "second"]


def test_a_whole_last_row_without_its_newline_is_kept(tmp_path, mi250_figures):
    log = tmp_path / "PERFLOG.md"
    append(mi250_figures, "first", log)
    twin = jsonl_path(log)
    twin.write_bytes(twin.read_bytes().rstrip(b"\n"))  # an edit by hand
    append(mi250_figures, "second", log)
    assert _ids(log) == ([2, 1], [2, 1])


def test_a_refused_rename_takes_the_jsonl_line_back(tmp_path, mi250_figures, monkeypatch):
    log = tmp_path / "PERFLOG.md"
    append(mi250_figures, "first", log)
    before = _state(log)

    def refuse(src, dst):
        raise OSError(28, "No space left on device", str(dst))
    with monkeypatch.context() as mp:
        mp.setattr(os, "replace", refuse)
        with pytest.raises(UserError, match=f"^{log}: cannot write: No space left on device$"):
            append(mi250_figures, "second", log)
    assert _state(log) == before
    append(mi250_figures, "third", log)
    assert _ids(log) == ([2, 1], [2, 1])


def test_a_short_write_then_disk_full_leaves_the_jsonl_as_it_was(tmp_path, mi250_figures, monkeypatch):
    """The kernel writes part of the line, then says the disk is full (in-process)."""
    log = tmp_path / "PERFLOG.md"
    append(mi250_figures, "first", log)
    before = _state(log)
    real_pwrite = os.pwrite

    def short_then_full(fd, data, offset):
        if len(data) > 10:
            return real_pwrite(fd, data[:10], offset)
        raise OSError(28, "No space left on device")
    with monkeypatch.context() as mp:
        mp.setattr(os, "pwrite", short_then_full)
        with pytest.raises(UserError, match="cannot write: No space left on device"):
            append(mi250_figures, "second", log)
    assert _state(log) == before
    append(mi250_figures, "third", log)
    assert _ids(log) == ([2, 1], [2, 1])


def test_disk_full_during_the_jsonl_append_then_space_again(tmp_path, mi250_figures):
    """The issue's case on a real 64 KiB tmpfs: the markdown's temporary file fits, the JSONL
    line does not (it crosses into a page the disk no longer has). Before the fix the torn line
    stayed and the next row was glued onto it: in the markdown, missing from `log show`."""
    with small_disk(tmp_path / "disk", "64k") as disk:
        if disk is None:
            pytest.skip("mount(2) is not allowed here (not root?): cannot make a full disk")
        log = disk / "PERFLOG.md"
        # A first row whose JSONL line ends 100 bytes short of a page boundary (each character
        # of the change is one byte of the line).
        append(mi250_figures, "x", log)
        change = "x" * (1 + 4096 - 100 - jsonl_path(log).stat().st_size)
        for p in (log, jsonl_path(log)):
            p.unlink()
        append(mi250_figures, change, log)
        assert jsonl_path(log).stat().st_size == 4096 - 100
        before = _state(log)
        row = {"id": 2, "date": read_rows(log)[0]["date"], "change": change, **mi250_figures}
        page = len(insert_row(log.read_text(), markdown_row(row)).encode())
        fill(disk, leave=-(-page // 4096) * 4096)  # room for the markdown's temporary file only
        with pytest.raises(UserError, match=f"^{log}: cannot write: No space left on device$"):
            append(mi250_figures, change, log)
        assert _state(log) == before and not [p for p in disk.iterdir() if ".tmp" in p.name]
        (disk / "filler").unlink()
        append(mi250_figures, "after the disk was freed", log)
        assert _ids(log) == ([2, 1], [2, 1])


def test_a_log_given_through_a_symlink_is_the_real_log(tmp_path, mi250_figures):
    real = tmp_path / "real" / "PERFLOG.md"
    real.parent.mkdir()
    append(mi250_figures, "first", real)
    link = tmp_path / "LOG.md"
    link.symlink_to(real)
    append(mi250_figures, "through the link", link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert _ids(real) == ([2, 1], [2, 1]) and _ids(link) == ([2, 1], [2, 1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LOG.md", "real"]
    assert sorted(p.name for p in real.parent.iterdir()) == ["PERFLOG.jsonl", "PERFLOG.md"]


def test_a_table_written_before_host_reads_is_upgraded_in_place(tmp_path):
    log = tmp_path / "PERFLOG.md"
    old_row = "| 1 | 2026-11-20 | a \\| b | t.json | 10.00 | 1,000 | 50.0 | 4.00 | k1 | 30.0% | 2.000 |"
    log.write_text("# Performance log\n\nnotes\n\n" + "\n".join([OLD_HEADER, OLD_SEPARATOR, old_row]) + "\n")
    row = append(measured(host_reads_per_iteration=3.0), "second", log)
    assert row["id"] == 2  # the old table's id counts
    lines = log.read_text().splitlines()
    at = lines.index(HEADER)
    assert lines[at + 1] == SEPARATOR and OLD_HEADER not in lines
    assert [c.strip() for c in row_cells(lines[at + 2])][:3] == ["2", row["date"], "second"]
    assert [c.strip() for c in row_cells(lines[at + 2])][7:9] == ["4.00", "3.00"]
    assert [c.strip() for c in row_cells(lines[at + 3])] == \
        ["1", "2026-11-20", "a \\| b", "t.json", "10.00", "1,000", "50.0", "4.00", "", "k1", "30.0%", "2.000"]
    assert lines[:4] == ["# Performance log", "", "notes", ""]  # the rest of the file as it was
