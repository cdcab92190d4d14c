"""One run per folder at a time, and no stale temporaries: a run (the trainer) holds an flock on
its folders while it lives, so a second run into one of them (`python -m trainer --output-dir X`
twice, `run --resume` of a live run) stops with one line before it touches a file; the kernel
drops the lock when the run dies, even by SIGKILL. A writer killed before its rename leaves a
`.<name>.<pid>.<random>.tmp`, which the next write of that file removes (never a live one)."""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.helpers import TINY_CONFIG, clean_env, error_lines, run_cmd
from tests.support.paths import DATA

MI250 = DATA / "hta" / "mi250_minitoy_rocm.json.gz"
BUSY = "another run is writing into this folder; wait for it to finish or use another folder"


def _trainer(out: Path, cfg: Path, iterations: int) -> list[str]:
    return [sys.executable, "-m", "trainer", "--output-dir", str(out), "--config", str(cfg),
            "--total-iterations", str(iterations), "--no-progress", "--device", "cpu"]


@pytest.mark.slow
def test_a_second_run_into_a_live_folder_is_refused_until_the_first_dies(tmp_path):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY_CONFIG + "warmup = false\n")
    root = tmp_path / "traces"
    out = root / "live"
    env = clean_env(OMP_NUM_THREADS="1")
    first = subprocess.Popen(_trainer(out, cfg, 100_000), env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text():
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
            time.sleep(0.2)
        rows = (out / "metrics.jsonl").read_text()
        second = run_cmd(_trainer(out, cfg, 3)[1:], env=env)
        assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr
        assert error_lines(second.stderr) == [f"Error: {out}: {BUSY}"]
        resumed = run_cmd(["-m", "goodhart_prof.cli", "run", "--resume", "--name", "live",
                           "--output-dir", str(root), "--config", str(cfg)], env=env)
        assert resumed.returncode == 2 and error_lines(resumed.stderr) == [f"Error: {out}: {BUSY}"]
        assert (out / "metrics.jsonl").read_text().startswith(rows)  # the first run's file kept
        assert first.poll() is None  # and the first run goes on
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    third = run_cmd(_trainer(out, cfg, 2)[1:], env=env)  # the kernel dropped the dead run's lock
    assert third.returncode == 0, third.stderr
    assert "replacing" in third.stderr and (out / "run.json").is_file()


def test_the_lock_is_dropped_when_its_holder_is_killed(tmp_path):
    from goodhart_prof.fileio import FolderBusy, folder_lock

    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from goodhart_prof.fileio import take_folder_lock\n"
        "take_folder_lock(sys.argv[1]); print('held', flush=True); time.sleep(600)"), str(tmp_path)],
        stdout=subprocess.PIPE, text=True, env=clean_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderBusy, match=f"^{tmp_path}: {BUSY}$"):
            with folder_lock(tmp_path):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with folder_lock(tmp_path):  # free again: nothing stale is left behind
        assert os.listdir(tmp_path) == []


# -- stale temporaries ----------------------------------------------------------------------------
def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_the_next_write_removes_its_dead_writers_temporaries_only(tmp_path):
    from goodhart_prof.fileio import atomic_path

    target = tmp_path / "out.pftrace"
    dead = tmp_path / f".out.pftrace.{_dead_pid()}.k2j4h5g6.tmp"
    dead.write_bytes(b"\0" * (1 << 20))  # what a killed export leaves (up to 48 MB)
    other_file = tmp_path / f".other.pftrace.{_dead_pid()}.aaaa1111.tmp"
    other_file.write_bytes(b"another file's")
    live = tmp_path / f".out.pftrace.{os.getppid()}.abcd1234.tmp"  # a live process's
    live.write_bytes(b"being filled")
    locked = tmp_path / f".out.pftrace.{_dead_pid()}.zzzz9999.tmp"  # its writer in another pid
    locked.write_bytes(b"being filled too")                         # namespace holds its lock
    fd = os.open(locked, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with atomic_path(target) as tmp:
            assert not dead.exists()
            assert tmp.name.startswith(f".out.pftrace.{os.getpid()}.")
            tmp.write_bytes(b"new")
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [target.name, other_file.name, live.name, locked.name])


def test_an_export_cleans_up_after_a_killed_one(tmp_path):
    out = tmp_path / "out.pftrace"
    stale = tmp_path / f".out.pftrace.{_dead_pid()}.q1w2e3r4.tmp"
    stale.write_bytes(b"\0" * (1 << 20))
    res = run_cmd(["-m", "goodhart_prof.cli", "export", str(MI250), "-o", str(out)])
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.pftrace"]


def test_exclusive_lock_is_held_once_per_file_and_freed_on_close(tmp_path):
    from goodhart_prof.fileio import exclusive_lock
    path = tmp_path / "log.lock"
    path.write_text("")
    first = os.open(path, os.O_RDWR)
    second = os.open(path, os.O_RDWR)  # a second open file description: flock treats it as another holder
    try:
        assert exclusive_lock(first) is True
        assert exclusive_lock(second) is False  # busy, and never waits
        os.close(first)
        first = -1
        assert exclusive_lock(second, wait=True) is True
        folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        assert exclusive_lock(folder) is True  # a folder locks like a file
        os.close(folder)
    finally:
        for fd in (first, second):
            if fd >= 0:
                os.close(fd)
