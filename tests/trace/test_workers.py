"""goodhart_prof/trace/workers.py: decode worker processes that die with the process that started
them. The pool's workers are this process's children; a parent killed with SIGKILL takes its
workers with it; a worker whose parent is already gone when it starts ends at once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from goodhart_prof.trace.workers import worker_pool
from tests.support.paths import ROOT

PARENT = """
import os, time
from goodhart_prof.trace.workers import worker_pool
pool = worker_pool(1)
print(pool.submit(os.getpid).result(), flush=True)
time.sleep(600)
"""


def _parent_and_self(_) -> tuple[int, int]:
    return os.getppid(), os.getpid()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_pools_workers_are_children_of_this_process():
    with worker_pool(2) as pool:
        answers = list(pool.map(_parent_and_self, range(4)))
    assert {parent for parent, _ in answers} == {os.getpid()}
    assert os.getpid() not in {worker for _, worker in answers}


def test_a_killed_parent_takes_its_workers_with_it():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        worker = int(parent.stdout.readline())
        assert not _gone(worker)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 5
        while not _gone(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(worker)
    finally:
        parent.kill()


def test_a_worker_whose_parent_is_already_gone_ends():
    code = "from goodhart_prof.trace.workers import die_with_parent\ndie_with_parent(1)\nprint('alive')"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert (res.returncode, res.stdout) == (1, "")  # its parent is this test, not process 1
