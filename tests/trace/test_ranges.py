"""A file over 64 MB (generated here, never committed) is decoded in byte ranges by forked
worker processes. Its figures equal a whole decode's; a file truncated while it is read, or a
worker that dies, ends in a one-line error naming the file (exit 2), never SIGBUS or a
traceback; a worker dies with its parent. The subprocess runs `analyze` through a small wrapper
that makes the loader hit a hook at a fixed point (no sleeps racing the loader)."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import goodhart_prof.trace.load as loader
import goodhart_prof.trace.ranges as ranges
from goodhart_prof.trace.load import load

ROOT = Path(loader.__file__).resolve().parents[2]  # the checkout under test
BIG_EVENTS = 460_000  # ~70 MB of JSON

WRAPPER = r"""
import os, signal, sys, time
import goodhart_prof.trace.ranges as R
from goodhart_prof import cli
path, hook = sys.argv[1], sys.argv[2]
parent = os.getpid()

def wrap(name, before):
    original = getattr(R, name)
    def hooked(*args, **kwargs):
        before()
        return original(*args, **kwargs)
    hooked.__qualname__, hooked.__module__ = name, R.__name__  # pickled by name, as the original is
    setattr(R, name, hooked)

def truncate():
    os.truncate(path, os.path.getsize(path) // 2)

def hold():
    if os.getpid() == parent:
        print("ready", flush=True)
        time.sleep(600)

if hook == "truncate-ranges":  # after the size check, before the ranges are read
    wrap("split_range", truncate)
elif hook == "truncate-whole":  # after the whole file is read (mapped, before the fix)
    wrap("piece_of", truncate)
elif hook == "kill-worker":
    wrap("_file_range_worker", lambda: os.kill(os.getpid(), signal.SIGKILL))
elif hook == "kill-buffer-worker":  # a worker decoding its range of a document in memory
    R._core_free = lambda: True  # whatever the machine's load (the tests' own processes)
    wrap("_buffer_range_worker", lambda: os.kill(os.getpid(), signal.SIGKILL))
elif hook == "hold-parent":  # the parent stops while its workers decode their ranges
    wrap("stream_range", hold)
sys.argv = ["goodhart-prof", "analyze", path, "--json", "--no-progress"]
sys.exit(cli.main())
"""


def big_trace(path: Path, n: int) -> Path:
    """A trace of `n` events: cpu ops on text threads "main" and "worker" (either side of any
    cut), kernels, python frames, memory instants, and after the events a 5 MB list of
    event-like objects (not events)."""
    rows = []
    for i in range(n):
        k = i % 4
        if k == 0:
            rows.append('{"ph":"X","cat":"cpu_op","name":"aten::item","pid":1,"tid":"%s","ts":%d,"dur":3,'
                        '"args":{"External id":%d}}' % ("main" if i < n // 2 else "worker", 10 * i, i))
        elif k == 1:
            rows.append('{"ph":"X","cat":"kernel","name":"k%d","pid":0,"tid":7,"ts":%d,"dur":2,'
                        '"args":{"device":0,"stream":7,"correlation":%d}}' % (i % 5, 10 * i + 1, i))
        elif k == 2:
            rows.append('{"ph":"X","cat":"python_function","name":"train.py(%d): step","pid":1,"tid":1,'
                        '"ts":%d,"dur":4,"args":{"Python id":%d,"Python parent id":1}}' % (i % 9, 10 * i, i))
        else:
            rows.append('{"ph":"i","cat":"cpu_instant_event","name":"[memory]","pid":1,"tid":1,"ts":%d,'
                        '"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Total Allocated":%d}}' % (10 * i, i))
    trailer = ",".join('{"ph":"X","cat":"kernel","name":"phantom","pid":0,"tid":7,"ts":%d,"dur":1}' % i
                       for i in range(70_000))
    with open(path, "w") as fh:
        fh.write('{"schemaVersion":1,"deviceProperties":[{"id":0,"name":"GPU 0"}],"traceEvents":[\n')
        fh.write(",\n".join(rows))
        fh.write('],"distributedInfo":{"rank":0,"world_size":1},"otherList":[' + trailer + "]}")
    return path


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    path = big_trace(tmp_path_factory.mktemp("big") / "big.json", BIG_EVENTS)
    assert path.stat().st_size > loader.PIECE_BYTES
    return path


def analyze(path: Path, hook: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WRAPPER, str(path), hook], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300, **kwargs)


def test_a_file_over_64_mb_decoded_in_ranges_equals_it_decoded_whole(big, monkeypatch):
    split = load(big, workers=2)
    monkeypatch.setattr(loader, "PIECE_BYTES", 1 << 40)
    whole = load(big, workers=1)
    assert len(split.events) == len(whole.events) == BIG_EVENTS // 2  # no phantom kernels
    assert split.events.equals(whole.events) and split.memory.equals(whole.memory)
    for c, values in whole.frames.columns.items():
        assert (split.frames.columns[c] == values).all(), c
    items = split.events[split.events["name"] == "aten::item"]
    assert items["tid"].nunique() == 2  # "main" and "worker" stay two threads
    assert split.ranks == whole.ranks == [0] and split.world_size == 1


def test_a_file_truncated_while_its_ranges_are_read_is_a_one_line_error(big, tmp_path):
    path = Path(shutil.copyfile(big, tmp_path / "big.json"))
    proc = analyze(path, "truncate-ranges")
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {path}: changed while being read"), lines


def test_a_file_truncated_after_it_was_read_loads_what_was_read(tmp_path):
    path = big_trace(tmp_path / "small.json", 20_000)
    size = path.stat().st_size
    proc = analyze(path, "truncate-whole")
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])  # no SIGBUS
    assert json.loads(proc.stdout)["trace"]["events"] == 10_000
    assert os.path.getsize(path) == size // 2  # it was truncated, after the read


def test_a_decode_worker_that_dies_is_a_one_line_error(big):
    proc = analyze(big, "kill-worker")
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {big}: a decode worker process died"), lines


def test_a_worker_that_dies_on_a_document_in_memory_is_a_one_line_error(tmp_path, monkeypatch):
    """A gzip document inflated in memory (over ranges.PARALLEL_DOC_BYTES) is cut in place over
    two processes on the msgspec way (the native decoder, off here, uses threads instead); the
    worker's death names the file, exit 2."""
    monkeypatch.setenv("GOODHART_PROF_NATIVE", "0")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: the loader uses no worker process here")
    plain = big_trace(tmp_path / "mid.json", 150_000)
    path = tmp_path / "mid.json.gz"
    path.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=1))
    assert os.path.getsize(plain) > ranges.PARALLEL_DOC_BYTES
    proc = analyze(path, "kill-buffer-worker")
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {path}: a decode worker process died"), lines
    assert json.loads(analyze(path, "none").stdout)["trace"]["events"] == 75_000  # unhooked: it loads


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_decode_workers_die_with_their_parent(big):
    parent = subprocess.Popen([sys.executable, "-c", WRAPPER, str(big), "hold-parent"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert parent.stdout.readline().strip() == b"ready"  # its worker is decoding a range now
        workers = psutil.Process(parent.pid).children(recursive=True)
        assert workers
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 5
        while not all(map(_gone, workers)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(map(_gone, workers)), [w.pid for w in workers if not _gone(w)]
    finally:
        parent.kill()
        for w in psutil.Process().children(recursive=True):
            if w.pid != parent.pid and w in workers:
                w.kill()
