"""Run folders (goodhart_prof/capture/runs.py): one folder per `goodhart-prof run`, `latest`, the runs
`diff` picks with no arguments; and end to end: two real runs, then `diff` with no arguments."""
from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from goodhart_prof.capture import runs
from goodhart_prof.errors import UserError
from tests.support.runs import make_run
from tests.support.helpers import TINY_CONFIG, clean_env, error_lines, read_trace, run_cmd, step_labels

NOW = time.mktime((2026, 11, 23, 12, 40, 55, 0, 0, -1))
STAMP = "2026-11-23T12-40-55"


# -- making run folders ----------------------------------------------------------------------------
def test_timestamp_names_never_collide(tmp_path):
    root = tmp_path / "traces"
    first = runs.create_run_folder(root, now=NOW)
    second = runs.create_run_folder(root, now=NOW)
    third = runs.create_run_folder(root, now=NOW)
    assert [first.name, second.name, third.name] == [STAMP, f"{STAMP}-2", f"{STAMP}-3"]
    assert all(p.is_dir() and not any(p.iterdir()) for p in (first, second, third))


def _make_at(root: str, queue) -> None:
    queue.put(runs.create_run_folder(Path(root), now=NOW).name)


def test_runs_started_at_once_get_their_own_folders(tmp_path):
    """Eight processes make a folder in the same second: os.mkdir is exclusive, so each gets
    its own name."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_make_at, args=(str(tmp_path), queue)) for _ in range(8)]
    for proc in procs:
        proc.start()
    names = sorted(queue.get(timeout=30) for _ in procs)
    for proc in procs:
        proc.join(timeout=30)
    assert names == sorted([STAMP] + [f"{STAMP}-{k}" for k in range(2, 9)])
    assert sorted(p.name for p in tmp_path.iterdir()) == names


def test_a_name_that_exists_is_an_error_and_keeps_the_run(tmp_path):
    folder = make_run(tmp_path, "baseline", "2026-11-23T12:40:58+0000")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(UserError, match=r"baseline: a run named 'baseline' already exists; choose another --name"):
        runs.create_run_folder(tmp_path, "baseline")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert runs.create_run_folder(tmp_path, "after") == tmp_path / "after"


@pytest.mark.parametrize("name", ["", "a/b", "..", ".", "latest", ".hidden", " padded", "a\\b"])
def test_bad_names_are_refused(tmp_path, name):
    with pytest.raises(UserError, match="a run name is one folder name"):
        runs.create_run_folder(tmp_path, name)
    assert list(tmp_path.iterdir()) == []


def test_resume_picks_the_named_run_or_the_newest_checkpoint(tmp_path):
    old = make_run(tmp_path, "old", "2026-11-23T12:00:00+0000",
                   interrupted={"signal": "SIGINT", "at_iteration": 1})
    new = make_run(tmp_path, "new", None, record=False)  # killed: no run.json, a checkpoint
    make_run(tmp_path, "plain", "2026-11-23T13:00:00+0000")  # newest, but no checkpoint
    for folder, t in ((old, 1_000), (new, 2_000)):
        (folder / "checkpoint-rank0.pt").write_bytes(b"x")
        os.utime(folder / "checkpoint-rank0.pt", (t, t))
    assert runs.resume_folder(tmp_path, None) == new
    assert runs.resume_folder(tmp_path, "old") == old
    with pytest.raises(UserError, match="no run named 'gone' to resume"):
        runs.resume_folder(tmp_path, "gone")
    with pytest.raises(UserError, match="no run with a checkpoint to resume"):
        runs.resume_folder(tmp_path / "plain", None)
    done = make_run(tmp_path, "done", "2026-11-23T14:00:00+0000")  # finished (issue 32 item 1)
    (done / "checkpoint-rank0.pt").write_bytes(b"x")
    with pytest.raises(UserError, match="this run finished"):
        runs.resume_folder(tmp_path, "done")
    with pytest.raises(UserError, match="this run finished"):
        runs.resume_folder(tmp_path, None)  # the newest checkpoint is a finished run's: refused


# -- end to end: run, run again, diff --------------------------------------------------------------
@pytest.mark.slow
def test_run_twice_then_diff_compares_them_and_keeps_both(tmp_path):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY_CONFIG + "warmup = false\n")
    root = tmp_path / "traces"
    env = clean_env(OMP_NUM_THREADS="1")
    run = ["-m", "goodhart_prof.cli", "run", "--iterations", "1", "--config", str(cfg),
           "--output-dir", str(root), "--no-progress"]
    first = run_cmd(run + ["--checkpoint-every", "1"], env=env)
    assert first.returncode == 0, first.stderr
    (a,) = [p for p in root.iterdir() if p.name != "latest"]
    assert os.readlink(root / "latest") == a.name
    kept = {str(p.relative_to(a)): p.read_bytes() for p in a.rglob("*") if p.is_file()}
    assert {"run.json", "metrics.jsonl", "rank-0.pt.trace.json.gz",
            "checkpoint-rank0.pt", "attribution/rank-0.pt.trace.json.gz"} <= set(kept)
    assert f"run folder: {a} (run.json)" in first.stdout

    second = run_cmd(run + ["--name", "after", "--seed", "7"], env=env)
    assert second.returncode == 0, second.stderr
    b = root / "after"
    assert os.readlink(root / "latest") == "after"
    assert {str(p.relative_to(a)): p.read_bytes() for p in a.rglob("*") if p.is_file()} == kept  # nothing lost
    record = json.loads((b / "run.json").read_text())
    assert (record["run_dir"], record["run_name"], record["config"]["seed"]) == (str(b), "after", 7)

    clash = run_cmd(run + ["--name", "after"], env=env)
    assert clash.returncode == 2
    assert error_lines(clash.stderr) == [f"Error: {b}: a run named 'after' already exists; choose "
                                         f"another --name (or --resume it)"]
    assert json.loads((b / "run.json").read_text()) == record
    assert sorted(p.name for p in root.iterdir()) == sorted([a.name, "after", "latest"])

    diff = run_cmd(["-m", "goodhart_prof.cli", "diff", "--json"], env=clean_env(PROF_OUTPUT_DIR=str(root)))
    assert diff.returncode == 0, diff.stderr
    created = json.loads((a / "run.json").read_text())["created"]
    assert error_lines(diff.stderr) == [f"A: {a} ({created}), B: {b} ({record['created']})"]
    doc = json.loads(diff.stdout)
    assert doc["a"]["paths"] == [str(a / "rank-0.pt.trace.json.gz")]
    assert doc["b"]["paths"] == [str(b / "rank-0.pt.trace.json.gz")]
    named = run_cmd(["-m", "goodhart_prof.cli", "diff", a.name, "after", "--root", str(root), "--json"],
                    env=clean_env())
    assert named.returncode == 0, named.stderr
    assert json.loads(named.stdout)["summary"] == doc["summary"]

    log = tmp_path / "PERFLOG.md"
    added = run_cmd(["-m", "goodhart_prof.cli", "log", "add", "--change", "seed 7", "--log", str(log)],
                    env=clean_env(PROF_OUTPUT_DIR=str(root)))
    assert added.returncode == 0, added.stderr
    assert error_lines(added.stderr) == [f"adding the latest run: {b} ({record['created']})"]
    row = json.loads(log.with_suffix(".jsonl").read_text().splitlines()[-1])
    assert row["env_steps_per_s"] == record["env_steps_per_s"] and row["trace"] == str(b)

    # --resume without --name finds the newest run with a checkpoint (A); A finished, so it is
    # refused and nothing of A is touched (issue 32 item 1: it used to train again over A's trace).
    resumed = run_cmd(["-m", "goodhart_prof.cli", "run", "--iterations", "2", "--config", str(cfg),
                       "--output-dir", str(root), "--no-progress", "--resume"], env=env)
    assert resumed.returncode == 2, resumed.stderr
    assert error_lines(resumed.stderr) == [f"Error: {a}: this run finished (its run.json records no "
                                           f"interruption); --resume continues an interrupted run: "
                                           f"start a new one"]
    assert sorted(p.name for p in root.iterdir()) == sorted([a.name, "after", "latest"])
    assert os.readlink(root / "latest") == "after"
    assert {str(p.relative_to(a)): p.read_bytes() for p in a.rglob("*") if p.is_file()} == kept
    assert step_labels(read_trace(a / "rank-0.pt.trace.json.gz")["traceEvents"]) == ["ProfilerStep#1"]
