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

import ipaddress
import logging
import os
import re
import resource
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import click
import numpy as np

from ..errors import UserError, warn
from .file_ranks import trace_files
from .load import TraceError, finish, load_rank_file
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
    """Load PATH's rank files one per Dask task (`task(file, index)`, replaceable for tests).

    `--workers N` starts no more workers than there are rank files and cores (`worker_count`,
    said on stderr when it takes fewer), and only under open-files and address-space limits they
    fit in (`ensure_open_files`, `ensure_address_space`); a `--scheduler` address is checked
    before Dask sees it."""
    if scheduler is not None:
        check_scheduler(scheduler)
    distributed = require_dask("--scheduler" if scheduler is not None else "--workers")
    started = time.perf_counter()
    path = Path(path)
    listed: list[str] = []  # rank files that are no files (dangling links, ...): warned for
    files = trace_files(path, strict, listed)
    if scheduler is None:
        workers, note = worker_count(workers, len(files), _cores())
        if note:
            warn(note)
        ensure_open_files(workers)
        ensure_address_space(workers)
    with _client(distributed, workers, scheduler) as client:
        outcomes = _gather(distributed, client, files, task, strict, rank_timeout_s)
    return finish(path, files, outcomes, strict, listed, started=started)  # load cost: the client's


SCHEDULER_PROTOCOLS = ("tcp", "tls", "ws", "wss", "ucx")
SCHEDULER_EXAMPLE = "tcp://127.0.0.1:8786"
_HOST_NAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?")


def check_scheduler(address: str) -> None:
    """A one-line UserError unless `address` is PROTOCOL://HOST:PORT (or HOST:PORT, tcp) with a
    protocol Dask speaks, a host name or IP address (IPv6 in brackets) and a port 1-65535.
    Checked before Dask sees it: Dask answers a malformed one with a ValueError or TypeError."""
    if not address:
        raise UserError(f"--scheduler: the address is empty (expected e.g. {SCHEDULER_EXAMPLE})")
    why = _address_problem(address)
    if why:
        raise UserError(f"--scheduler {address}: not a scheduler address: {why} "
                        f"(expected e.g. {SCHEDULER_EXAMPLE})")


def _address_problem(address: str) -> str | None:
    protocol, sep, rest = address.partition("://")
    if not sep:
        protocol, rest = "tcp", address
    elif protocol not in SCHEDULER_PROTOCOLS:
        return f"protocol {protocol}:// is not one Dask speaks ({', '.join(SCHEDULER_PROTOCOLS)})"
    if rest.startswith("["):
        host, bracket, port = rest[1:].partition("]")
        if not bracket:
            return "an IPv6 host needs its closing ]"
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"host [{host}] is not an IPv6 address"
        if not port.startswith(":"):
            return "no port"
        port = port[1:]
    else:
        host, colon, port = rest.rpartition(":")
        if not colon:
            return "no port"
        if not host:
            return "no host"
        if not _HOST_NAME.fullmatch(host):
            return f"host {host!r} is not a host name or IP address"
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        return f"port {port} is not 1 to 65535" if port else "no port"
    return None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def worker_count(requested: int | None, files: int, cores: int) -> tuple[int, str | None]:
    """The local cluster's worker processes: the ones asked for, but no more than the rank files
    (one task each) or the cores (each worker decodes on one); with the line that says so when
    fewer than asked for. Never more, whatever was asked: each worker is a process."""
    wanted = requested or 1
    count = max(1, min(wanted, files, cores))
    if count == wanted:
        return count, None
    return count, f"--workers {requested}: using {count} ({files} rank files, {cores} cores)"


# Open files the main process holds for a LocalCluster of N workers (the scheduler's and nanny's
# sockets and pipes): measured on dask/distributed 2026.8 as at most 33 + 10 per worker (1: 33,
# 2: 42, 4: 64, 8: 103), with margin; under it Nannies fail to start, or workers fail with EMFILE.
FILES_BASE, FILES_PER_WORKER = 32, 12


def files_needed(workers: int) -> int:
    return FILES_BASE + FILES_PER_WORKER * workers


# Address space (ulimit -v) each process of our LocalCluster needs: a worker's peak VmSize was
# 552 MB and the client's 885 MB (thread stacks are reserved, not used); on the 2-core machine
# `--workers 2` ran at ulimit -v 500000 and 700000 but not at 600000 ("can't start new thread")
# nor at 400000 (workers that cannot import pandas, and a hang): 1 GiB is asked for.
ADDRESS_SPACE_BYTES = 1 << 30


def ensure_address_space(workers: int) -> None:
    """Raise the soft address-space limit (`ulimit -v`, inherited by the worker processes) to the
    hard one when it is below ADDRESS_SPACE_BYTES; a one-line UserError when that is not allowed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft >= ADDRESS_SPACE_BYTES:
        return
    try:
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
        soft = hard
    except (ValueError, OSError):
        pass
    if soft != resource.RLIM_INFINITY and soft < ADDRESS_SPACE_BYTES:
        raise UserError(f"--workers {workers}: each Dask process needs about "
                        f"{ADDRESS_SPACE_BYTES / 1e6:,.0f} MB of address space, and the limit is "
                        f"{soft / 1e6:,.0f} MB (ulimit -v; raise it, or analyse without --workers)")


def ensure_open_files(workers: int) -> None:
    """Raise the soft open-files limit towards the hard one when it is below what `workers`
    need (the worker processes inherit it); a one-line UserError when even that is too low."""
    needed = files_needed(workers)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = hard if hard != resource.RLIM_INFINITY else max(needed, 4096)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    except (ValueError, OSError):  # not allowed here: the check below says what is needed
        pass
    if soft < needed:
        raise UserError(f"--workers {workers}: needs about {needed} open files, and the limit is "
                        f"{soft} (ulimit -n; raise it, or use fewer workers)")


@contextmanager
def _client(distributed, workers: int | None, scheduler: str | None) -> Iterator:
    if scheduler is not None:
        try:
            client = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise UserError(f"--scheduler {scheduler}: no Dask scheduler answered ({exc})") from None
        except (ValueError, TypeError, ImportError) as exc:  # e.g. ucx:// without its package
            raise UserError(f"--scheduler {scheduler}: Dask cannot use this address ({exc})") from None
        with client:
            yield client
        return
    import dask
    with _stop_signals() as started, dask.config.set(LOCAL_CONFIG), \
            _local_cluster(distributed, workers or 1) as cluster, distributed.Client(cluster) as client:
        started()
        yield client


def _local_cluster(distributed, workers: int):
    """Our LocalCluster, or the one-line error that says why it did not start (e.g. a worker
    process that cannot start a thread under a low `ulimit -v`: "Nanny failed to start")."""
    try:
        return distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                        dashboard_address=None, silence_logs=logging.CRITICAL)
    except (RuntimeError, OSError, TimeoutError) as exc:
        logging.getLogger("distributed").setLevel(logging.CRITICAL)  # its exit-time reaping notes
        raise UserError(f"--workers {workers}: the local Dask cluster did not start "
                        f"({_root_cause(exc)}; a low ulimit -v, -u or -n stops its worker "
                        "processes)") from None


def _root_cause(exc: BaseException) -> str:
    """The first error in an exception's chain (Dask wraps it: `Nanny failed to start`)."""
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    root = seen[-1]
    return f"{type(root).__name__}: {root}" if str(root) else type(root).__name__


STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


@contextmanager
def _stop_signals() -> Iterator[Callable[[], None]]:
    """SIGINT, SIGTERM and SIGHUP while our LocalCluster lives: one that comes while it starts is
    held until it is up (a cluster stopped half-started cannot be closed: distributed's exit hook
    then prints an AssertionError traceback), then each stops the load through the `with` blocks,
    which close the cluster and its worker processes: SIGINT as Ctrl-C does (`Aborted.`, exit
    130), SIGTERM and SIGHUP with `Aborted (SIGTERM).` and exit 128 + N. The handlers the process
    had are restored after. Yields the call that says the cluster is up."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    held: list[int] = []
    up = False

    def stop(signum: int) -> None:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        click.echo(f"Aborted ({signal.Signals(signum).name}).", err=True)
        raise SystemExit(128 + signum)

    def handler(signum, frame) -> None:
        if not up:
            held.append(signum)
        else:
            stop(signum)

    def started() -> None:
        nonlocal up
        up = True
        if held:
            stop(held[0])

    numbers = [getattr(signal, name) for name in STOP_SIGNALS if hasattr(signal, name)]
    before = {n: signal.getsignal(n) for n in numbers}
    for n in numbers:
        if before[n] is not signal.SIG_IGN:  # a signal the user ignores (nohup) stays ignored
            signal.signal(n, handler)
    try:
        yield started
    finally:
        for n, old in before.items():
            signal.signal(n, old)


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
