"""Errors shown to users: one line, exit code 2, no traceback.

Every message is made printable (`textsafe.printable`): a control character in it (a file name's
newline, a trace's `ESC[2J`) is written as its escape, so an error is always one line and never
acts on the terminal. Name a path in a message with `textsafe.quote_path` to have it quoted when it
needs escapes."""
from __future__ import annotations

import os
import resource
import traceback

import click

from .textsafe import printable, quote_path


class UserError(click.ClickException):
    """Bad input from the user (a flag, a file, a setting). Printed as `Error: <message>`."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(printable(message))


class TraceError(UserError):
    """A trace input cannot be used; the message names the file and the problem."""


class out_of_memory:  # noqa: N801 -- used as a context manager, like contextlib's
    """`with out_of_memory(paths):` around a load and its analysis: a MemoryError inside becomes
    the one-line TraceError `PATH (SIZE): out of memory loading or analysing it: it needed more
    than ...` (the address-space limit, `ulimit -v`, or the memory available, and how far this
    process got). Everything but the last figure is worked out on entry, and the failed work's
    frames are cleared before the message is made, so the error path allocates little."""

    def __init__(self, *paths) -> None:
        self.paths = paths

    def __enter__(self) -> "out_of_memory":
        named = [f"{quote_path(p)} ({_size_mb(p)})" for p in self.paths]
        self.prefix = " and ".join(named) + ": out of memory loading or analysing " + \
            ("it" if len(named) == 1 else "them")
        self.limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if kind is None or not issubclass(kind, MemoryError):
            return False
        traceback.clear_frames(tb)  # the failed work's tables go now (the running frame stays)
        del exc, tb
        try:
            message = f"{self.prefix}: {_needed(self.limit)}"
        except (MemoryError, OSError, ValueError):
            message = self.prefix
        raise TraceError(message) from None


def _size_mb(path) -> str:
    """A file's size, or the total of a folder's files (not its subfolders), in MB."""
    try:
        if os.path.isdir(path):
            size = sum(e.stat().st_size for e in os.scandir(path) if e.is_file())
        else:
            size = os.stat(path).st_size
    except OSError:
        return "size unknown"
    return f"{size / 1e6:,.1f} MB"


def _needed(limit: int) -> str:
    """What memory the process had: the address-space limit and its peak, else what is free."""
    if limit != resource.RLIM_INFINITY:
        return (f"it needed more than the {limit / 1e6:,.0f} MB this process may use (ulimit -v; "
                f"it had reached {_proc_mb('/proc/self/status', 'VmPeak:'):,.0f} MB)")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6  # KiB on Linux
    return (f"it needed more than the {_proc_mb('/proc/meminfo', 'MemAvailable:'):,.0f} MB of memory "
            f"available (this process had reached {peak_mb:,.0f} MB resident)")


def _proc_mb(file: str, key: str) -> float:
    """A `Key:   123 kB` figure (KiB) of a /proc file, in MB (ValueError where there is none)."""
    with open(file, "rb") as fh:
        for line in fh:
            if line.startswith(key.encode()):
                return int(line.split()[1]) * 1024 / 1e6
    raise ValueError(key)


def warn(message: str) -> None:
    """A warning on stderr, one printable line: `warning: <message>`."""
    click.echo(f"warning: {printable(message)}", err=True)


def run_cli(command: click.Command, prog_name: str, args: list[str] | None = None) -> None:
    """Run a click command so that every user error is one line on stderr and exit code 2.

    Click's own usage errors print a usage block first; we print just the message.
    """
    import sys

    try:
        code = command.main(args=args, prog_name=prog_name, standalone_mode=False)
    except click.ClickException as exc:  # usage errors, UserError and click's own
        click.echo(f"Error: {printable(exc.format_message())}", err=True)
        sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
    except click.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except MemoryError as exc:  # where no `out_of_memory` names the input: still one line
        traceback.clear_frames(exc.__traceback__)
        try:
            why = f" ({_needed(resource.getrlimit(resource.RLIMIT_AS)[0])})"
        except (MemoryError, OSError, ValueError):
            why = ""
        click.echo(f"Error: out of memory{why}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
