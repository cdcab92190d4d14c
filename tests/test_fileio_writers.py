"""Issue 32, item 2: every output the user names is created exclusively. Four real processes write
the same final name at once (released together by a barrier, after the commands' early checks):
exactly one succeeds, the other three get the one-line "already exists" error (exit 2) and leave
nothing behind; a file that appears after the check is never replaced without --force."""
from __future__ import annotations

import errno
import multiprocessing
import os
import sys
from pathlib import Path

import pytest

from goodhart_prof import fileio
from goodhart_prof.fileio import OutputExists, writing
from tests.support.paths import DATA

MI250 = DATA / "hta" / "mi250_minitoy_rocm.json.gz"
WRITERS = 4

COMMANDS = {
    "analyze --html": lambda out: ["analyze", str(MI250), "--html", str(out)],
    "export chrome json.gz": lambda out: ["export", str(MI250), "-o", str(out)],
    "export chrome json": lambda out: ["export", str(MI250), "-o", str(out)],
    "export perfetto": lambda out: ["export", str(MI250), "-o", str(out)],
    "diff --html": lambda out: ["diff", str(MI250), str(MI250), "--html", str(out)],
}
NAMES = {"analyze --html": "report.html", "export chrome json.gz": "out.json.gz",
         "export chrome json": "out.json", "export perfetto": "out.pftrace", "diff --html": "diff.html"}


def _writer(args: list[str], barrier, log: str) -> None:
    """One process: stdout/stderr to its log, wait for the others, run the command in-process."""
    from goodhart_prof.cli import main

    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = sys.stderr = open(fd, "w", buffering=1)  # not pytest's capture
    barrier.wait()
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _race(tmp_path: Path, args: list[str]) -> tuple[list[int], list[str]]:
    import goodhart_prof.cli  # noqa: F401  (imported before the fork: the writers start at once)
    import goodhart_prof.analysis  # noqa: F401

    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(WRITERS)
    logs = [tmp_path / f"log{k}.txt" for k in range(WRITERS)]
    procs = [ctx.Process(target=_writer, args=(args, barrier, str(log))) for log in logs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    return sorted(p.exitcode for p in procs), [log.read_text() for log in logs]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_concurrent_writers_one_wins(tmp_path, command):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / NAMES[command]
    codes, logs = _race(tmp_path, COMMANDS[command](out))
    assert codes == [0, 2, 2, 2], logs
    losers = [log for log in logs if "already exists" in log]
    assert len(losers) == 3
    for log in losers:
        errors = [line for line in log.splitlines() if line.startswith("Error")]
        assert errors == [f"Error: {out}: already exists (use --force to replace it)"], log
        assert "Traceback" not in log
    assert sorted(os.listdir(out_dir)) == [out.name]  # no temporaries left behind
    assert out.stat().st_size > 100


@pytest.mark.parametrize("command", ["analyze --html", "export perfetto"])
def test_concurrent_writers_with_force_all_succeed(tmp_path, command):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / NAMES[command]
    codes, logs = _race(tmp_path, [*COMMANDS[command](out), "--force"])
    assert codes == [0, 0, 0, 0], logs
    assert sorted(os.listdir(out_dir)) == [out.name]


def test_a_file_made_after_the_check_is_kept(tmp_path):
    final = tmp_path / "report.html"
    with pytest.raises(OutputExists, match="already exists"):
        with writing(final, exclusive=True) as tmp:
            tmp.write_text("ours")
            final.write_text("theirs, made while we were writing")
    assert final.read_text() == "theirs, made while we were writing"
    assert os.listdir(tmp_path) == ["report.html"]


def test_a_dangling_symlink_is_an_existing_name(tmp_path):
    final = tmp_path / "out.json"
    final.symlink_to(tmp_path / "nowhere")
    with pytest.raises(OutputExists):
        with writing(final, exclusive=True) as tmp:
            tmp.write_text("{}")
    assert final.is_symlink() and not (tmp_path / "nowhere").exists()


def test_without_hard_links_the_name_is_still_taken_exclusively(tmp_path, monkeypatch):
    def no_links(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(fileio.os, "link", no_links)
    final = tmp_path / "out.json"
    with writing(final, exclusive=True) as tmp:
        tmp.write_text("first")
    assert final.read_text() == "first"
    with pytest.raises(OutputExists):
        with writing(final, exclusive=True) as tmp:
            tmp.write_text("second")
    assert final.read_text() == "first"
    assert os.listdir(tmp_path) == ["out.json"]
