"""Worker processes for decoding that die with the process that started them.

A worker forked for a big file holds hundreds of MB; if its parent is killed (SIGKILL, the OOM
killer) nobody reads its result any more and it would wait on the result pipe forever. On Linux
the kernel kills it with its parent (`PR_SET_PDEATHSIG`); elsewhere a thread watches the parent.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

PR_SET_PDEATHSIG = 1
FORK = "fork" in multiprocessing.get_all_start_methods()  # workers that inherit this process's memory
WATCH_SECONDS = 0.5


def worker_pool(n: int) -> ProcessPoolExecutor:
    """A pool of `n` forked processes (where fork exists) that die with this one."""
    return ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("fork") if FORK else None,
                               initializer=die_with_parent, initargs=(os.getpid(),))


def die_with_parent(parent: int) -> None:
    """Worker initializer: end this process when `parent` ends."""
    if sys.platform.startswith("linux") and _pdeathsig():
        if os.getppid() != parent:  # the parent died before the signal was set up
            os._exit(1)
        return
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="parent-watch").start()


def _pdeathsig() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_SECONDS)
    os._exit(1)
