"""The signals that stop a run (SIGINT, SIGTERM, SIGHUP) and how the trainer turns them into a
recorded interruption. Torch-free, so that `python -m trainer` can hold them before its imports.

`python -m trainer` blocks the three signals first thing (`hold_signals`), before it imports torch
(seconds): one that comes during the imports waits, and is delivered once `catch_signals` has
made it raise `Interrupted`, where the entry can record it (a Ctrl-C then is an interruption like
any other, never a KeyboardInterrupt traceback from an import). `goodhart-prof run` starts the
trainer with them blocked too, which covers the interpreter's own start.
"""
from __future__ import annotations

import contextlib
import signal
from typing import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP arrived; `signum` says which (a KeyboardInterrupt, so every
    cleanup path that handles Ctrl-C handles all three)."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # 130 SIGINT, 143 SIGTERM, 129 SIGHUP, as a shell reports them


def _raise_interrupted(signum, frame) -> None:
    raise Interrupted(signum)


def hold_signals() -> None:
    """Block the stop signals: one that arrives waits until `catch_signals` releases it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def catch_signals() -> None:
    """From now on the stop signals raise Interrupted in the main thread; one held by
    `hold_signals` is delivered now. SIGHUP stays ignored where the process was started ignoring
    it (`nohup`); SIGINT and SIGTERM are caught even then (a shell starts `cmd &` ignoring SIGINT,
    and `kill -INT` of it must still stop the run)."""
    for signum in STOP_SIGNALS:
        if not kept_ignored(signum):
            signal.signal(signum, _raise_interrupted)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def default_signals() -> None:
    """A second signal while the interruption is being recorded stops the process at once (and
    none is left blocked by a `deferred` body the interruption cut short)."""
    for signum in STOP_SIGNALS:
        if not kept_ignored(signum):
            signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def kept_ignored(signum: int) -> bool:
    """SIGHUP ignored by whoever started us (`nohup`): it stays ignored."""
    return signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN


def ignore_signals() -> None:
    """The run is recorded (run.json written): a signal now has nothing left to stop, and must
    not turn a complete run's exit code into 128 + N."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """The stop signals wait until the body is done. For a body that takes a lock: Interrupted
    raised between a lock's acquire and the start of its `with` block leaves the lock held for
    ever (the metrics queue's lock: the next put, in the logger's close, would hang)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def signal_name(signum: int) -> str:
    """`SIGKILL` for 9; `signal 77` for a number that names no signal."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
