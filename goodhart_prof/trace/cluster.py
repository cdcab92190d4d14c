"""Many ranks on a Dask cluster: each worker loads one rank file, the client assembles the `Trace`.

Imported only for `analyze --workers N` (a `LocalCluster` of N single-threaded worker processes)
or `--scheduler ADDRESS` (an existing cluster); without them neither this module nor Dask loads.
A worker runs exactly what a local folder load runs per file (`load.load_rank_file`: read,
decode, columnar tables) and sends back that file's tables; the client assembles and analyses
them as a local load does (`load.finish`), so the report is the same document. A rank file that
fails (bad input, a worker that died, no answer within the time limit) is skipped with a
warning naming it, or stops the load under `strict`: never a hang.
"""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..errors import UserError
from .load import TraceError, finish, load_rank_file, trace_files
from .model import Trace
from ..textsafe import quote_path

RANK_TIMEOUT_S = 600.0     # one rank file's load on one worker thread; longer is reported, not awaited
CONNECT_TIMEOUT_S = 30.0   # reaching a --scheduler
# Our LocalCluster does not retry a rank whose worker died: a decode that ran out of memory would
# do it again, and each retry costs a worker restart. One task per worker thread at a time, so a
# death blames only the rank that was running.
LOCAL_CONFIG = {"distributed.scheduler.allowed-failures": 0,
                "distributed.scheduler.worker-saturation": 1.0}


def require_dask(option: str = "--workers"):
    """The `distributed` module, or the one-line error that says how to get it."""
    try:
        import distributed
    except ImportError:
        raise UserError(f"{option} needs Dask: pip install 'goodhart-prof[cluster]'") from None
    return distributed


def load_on_cluster(path: str | Path, workers: int | None = None, scheduler: str | None = None,
                    strict: bool = False, task: Callable = load_rank_file,
                    rank_timeout_s: float = RANK_TIMEOUT_S) -> Trace:
    """Load PATH's rank files one per Dask task (`task(file, index)`, replaceable for tests)."""
    distributed = require_dask("--scheduler" if scheduler else "--workers")
    started = time.perf_counter()
    path = Path(path)
    files = trace_files(path)
    with _client(distributed, workers, scheduler) as client:
        outcomes = _gather(distributed, client, files, task, strict, rank_timeout_s)
    return finish(path, files, outcomes, strict, started=started)  # load cost: the client's


@contextmanager
def _client(distributed, workers: int | None, scheduler: str | None) -> Iterator:
    if scheduler:
        try:
            client = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise UserError(f"--scheduler {scheduler}: no Dask scheduler answered ({exc})") from None
        with client:
            yield client
        return
    import dask
    with dask.config.set(LOCAL_CONFIG), \
            distributed.LocalCluster(n_workers=workers or 1, threads_per_worker=1, processes=True,
                                     dashboard_address=None,
                                     silence_logs=logging.CRITICAL) as cluster, \
            distributed.Client(cluster) as client:
        yield client


def _gather(distributed, client, files: list[Path], task: Callable, strict: bool,
            rank_timeout_s: float) -> list:
    """Each file's outcome (its tables or its error), taken as it finishes and released from the
    worker at once.

    No more tasks are in flight than the cluster has threads: a worker that dies then takes only
    the rank it was running with it (Dask blames every task it had been given), and each rank's
    time limit runs from when a thread is free for it."""
    try:
        client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
    except TimeoutError:
        raise UserError(f"the Dask cluster has no workers (waited {CONNECT_TIMEOUT_S:g} s)") from None
    slots = max(1, sum(client.nthreads().values()))
    outcomes: list = [None] * len(files)
    running: dict = {}  # future -> (file index, deadline)
    queued = iter(range(len(files)))
    try:
        while True:
            while len(running) < slots and (i := next(queued, None)) is not None:
                running[client.submit(shipped, task, files[i], i, pure=False)] = (i, time.monotonic() + rank_timeout_s)
            if not running:
                return outcomes
            first_deadline = min(deadline for _, deadline in running.values())
            try:
                done = distributed.wait(list(running), return_when="FIRST_COMPLETED",
                                        timeout=max(0.05, first_deadline - time.monotonic())).done
            except TimeoutError:
                done = set()
            now = time.monotonic()
            for future, (i, deadline) in list(running.items()):
                if future in done:
                    outcomes[i] = _outcome(distributed, future, files[i])
                elif now >= deadline:
                    outcomes[i] = TraceError(f"{files[i]}: not loaded within {rank_timeout_s:g} s on the cluster")
                else:
                    continue
                del running[future]
                future.release()
                if strict and isinstance(outcomes[i], Exception):
                    raise outcomes[i]
    finally:
        client.cancel(list(running))


def shipped(task: Callable, path: Path, index: int):
    """Worker: `task(path, index)` made lighter to send: the events' `end` (= ts + dur, rebuilt
    bit for bit on arrival) left out, the frames' names joined into one string (pickling a
    million str objects one by one costs more than decoding them did)."""
    result = task(path, index)
    if isinstance(result, Exception):
        return result
    result.table = result.table.drop(columns="end")
    result.frames.columns["name"] = _Joined("\0".join(result.frames.columns["name"].tolist()))
    return result


class _Joined(str):
    """Frame names joined by NUL for the trip back."""


def _arrived(result):
    """A `shipped` result as the task made it."""
    table = result.table
    table.insert(table.columns.get_loc("dur") + 1, "end", table["ts"].to_numpy() + table["dur"].to_numpy())
    joined = result.frames.columns["name"]
    names = np.empty(len(result.frames.columns["ts"]), dtype=object)
    names[:] = joined.split("\0") if len(names) else []
    result.frames.columns["name"] = names
    return result


def _outcome(distributed, future, file: Path):
    if future.status != "error":
        result = future.result()
        return result if isinstance(result, Exception) else _arrived(result)
    exc = future.exception()
    if isinstance(exc, distributed.KilledWorker):
        return TraceError(f"{quote_path(file)}: its Dask worker died loading it (killed, or out of memory)")
    if isinstance(exc, (TraceError, MemoryError)):
        return TraceError(f"{quote_path(file)}: {exc}")
    raise exc  # a bug, not bad input
