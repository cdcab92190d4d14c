"""Files are never half-written: every writer goes through fileio.atomic_path (a temporary file
beside the target, renamed over it). Each writer is made to fail at the rename, as a crash or a
full disk would: the old file must be untouched and no temporary file left behind."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.compare.comparison import compare
from goodhart_prof.fileio import WriteError, atomic_path, write_json
from goodhart_prof.perflog.log_file import append
from goodhart_prof.perflog.measure import measure
from goodhart_prof.capture.trace_files import compress
from goodhart_prof.report.export import chrome_json, perfetto
from goodhart_prof.report.diff import page as diff_html
from goodhart_prof.report.html import page as html
from goodhart_prof.trace.load import load
from goodhart_prof.trace.merge import merge_rank_traces
from tests.support.helpers import error_lines, run_cmd, write_tiny_config
from tests.support.paths import DATA

MI250 = DATA / "hta" / "mi250_minitoy_rocm.json.gz"
OLD = b"the previous version of this file"


@pytest.fixture(scope="module")
def analysis():
    return analyze(load(MI250))


def _profiler():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(8).mul(2).sum()
    return prof


def _profiler_trace(target: Path) -> None:
    """What the trace writer's child does (capture/trace_files.py), in this process so that the
    failing rename reaches it: the exported JSON compressed into the target."""
    exported = target.with_name(f".{target.name}.{os.getpid()}.x.tmp.json")
    _profiler().export_chrome_trace(str(exported))
    compress(exported, target)


def _checkpoint(tmp_path: Path):
    from trainer.config import build_config
    from trainer.train import Trainer

    cfg = build_config(write_tiny_config(tmp_path), device="cpu", output_dir=str(tmp_path))
    trainer = Trainer(cfg)
    return trainer.save_checkpoint


WRITERS = {
    "html report": lambda a, t, tmp: html.write_html(a, t, force=True),
    "perfetto export": lambda a, t, tmp: perfetto.write_perfetto(a, t, force=True),
    "chrome json export": lambda a, t, tmp: chrome_json.write_chrome_json(a, t, force=True),
    "diff html": lambda a, t, tmp: diff_html.write_html(compare(a, a), t, force=True),
    "merged trace": lambda a, t, tmp: merge_rank_traces({0: MI250}, t),
    "run.json": lambda a, t, tmp: write_json(t, {"schema": "goodhart-prof/run/v1"}),
    "profiler trace": lambda a, t, tmp: _profiler_trace(t),
    "performance log": lambda a, t, tmp: append(measure(a, MI250), "a change", t),
    "checkpoint": lambda a, t, tmp: _checkpoint(tmp)(t),
}
TARGETS = {"html report": "report.html", "perfetto export": "out.pftrace",
           "chrome json export": "out.json.gz", "diff html": "diff.html",
           "merged trace": "merged_trace.json", "run.json": "run.json",
           "profiler trace": "rank-0.pt.trace.json.gz", "performance log": "PERFLOG.md",
           "checkpoint": "checkpoint-rank0.pt"}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_failed_write_leaves_the_old_file(analysis, tmp_path, writer):
    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / TARGETS[writer]
    target.write_bytes(OLD)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "replace", _fail_rename)
        with pytest.raises(WriteError) as info:
            WRITERS[writer](analysis, target, tmp_path)
    # the one-line user error (exit 2 on the command line), never the raw OSError
    assert info.type is WriteError
    assert str(info.value) == f"{target}: cannot write: No space left on device (simulated)"
    assert target.read_bytes() == OLD
    # The performance log locks its JSON twin, so the twin exists (empty) after a failed first add.
    extra = {"PERFLOG.jsonl"} if writer == "performance log" else set()
    assert {p.name for p in folder.iterdir()} - extra == {target.name}
    WRITERS[writer](analysis, target, tmp_path)  # and with a working rename it is replaced
    assert target.read_bytes() != OLD
    assert not [p.name for p in folder.iterdir() if ".tmp" in p.name]


def _fail_rename(src, dst):
    raise OSError(28, "No space left on device (simulated)", str(dst))


def test_a_failed_write_is_one_error_line_and_exit_2(tmp_path, capsys):
    from goodhart_prof.cli import main
    target = tmp_path / "report.html"
    target.write_bytes(OLD)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "replace", _fail_rename)
        with pytest.raises(SystemExit) as info:
            main(["analyze", str(MI250), "--html", str(target), "--force"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert info.value.code == 2
    assert err == [f"Error: {target}: cannot write: No space left on device (simulated)"]
    assert target.read_bytes() == OLD


def test_atomic_path_keeps_the_target_until_the_body_succeeds(tmp_path):
    target = tmp_path / "f.txt"
    target.write_bytes(OLD)
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            assert tmp.parent == tmp_path and tmp.name.startswith(".f.txt.") and ".tmp" in tmp.name
            tmp.write_text("half")
            raise RuntimeError("crash in the middle")
    assert target.read_bytes() == OLD and [p.name for p in tmp_path.iterdir()] == ["f.txt"]
    with atomic_path(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["f.txt"]
    assert (target.stat().st_mode & 0o777) == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_analyze_html_replaces_only_with_force(tmp_path):
    out = tmp_path / "report.html"
    out.write_bytes(OLD)
    res = run_cmd(["-m", "goodhart_prof.cli", "analyze", str(MI250), "--html", str(out)])
    assert res.returncode == 2 and error_lines(res.stderr) == [
        f"Error: {out}: already exists (use --force to replace it)"] and out.read_bytes() == OLD
    res = run_cmd(["-m", "goodhart_prof.cli", "analyze", str(MI250), "--html", str(out), "--force"])
    assert res.returncode == 0, res.stderr
    assert out.read_bytes().startswith(b"<!DOCTYPE html>") or b"<html" in out.read_bytes()[:500]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]
