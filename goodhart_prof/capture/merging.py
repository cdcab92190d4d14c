"""Merging the ranks' traces in a process of its own, so the training process never imports the
reading side (trace/merge.py: msgspec, pandas): a machine without it (a bare GPU image) still trains
and writes its rank traces.

The child reads the rank files and writes `merged_trace.json` through trace/merge.py. Its outcome
comes back as: nothing (merged), `MergeUnavailable` (the reading side is not installed: the rank
traces stay as they are, and analyze reads them so), `UserError` (a one-line problem with a
file: a rank file that cannot be read back, a merged file that cannot be written), or
`RuntimeError` (anything else, with the child's last line).
A signal to the launcher while the child runs reaches the child as SIGINT, so it removes its
temporary file before it ends (a killed child would leave it behind).
"""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Mapping

from ..errors import UserError

MISSING = 3       # the child's exit code: a module of the reading side is not installed
USER_ERROR = 2    # the child's exit code: a one-line error (click's exit code for UserError)
STOP_GRACE_S = 10.0

_CHILD = """
import sys
from pathlib import Path
try:
    import click
    from goodhart_prof.trace.merge import merge_rank_traces
    from goodhart_prof.trace.raw import RawTraceError
except ModuleNotFoundError as exc:
    sys.stderr.write(str(exc.name))
    sys.exit({missing})
out, pairs = Path(sys.argv[1]), sys.argv[2:]
try:
    merge_rank_traces({{int(r): Path(p) for r, p in zip(pairs[::2], pairs[1::2])}}, out)
except click.ClickException as exc:
    sys.stderr.write(exc.format_message())
    sys.exit({user})
except RawTraceError as exc:
    sys.stderr.write(str(exc))
    sys.exit({user})
except KeyboardInterrupt:
    sys.exit(130)
""".format(missing=MISSING, user=USER_ERROR)


class MergeUnavailable(Exception):
    """The reading side is not installed where the trainer runs; `module` names what is missing."""

    def __init__(self, module: str) -> None:
        super().__init__(module)
        self.module = module


def merge_apart(traces: Mapping[int, Path], out: Path) -> None:
    """Merge `traces` (rank -> file) into `out` in a child process; see the module's docstring."""
    argv = [sys.executable, "-c", _CHILD, str(out)]
    for rank, path in sorted(traces.items()):
        argv += [str(rank), str(path)]
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        _, err = child.communicate()
    except BaseException:  # the launcher's signal (Interrupted) or Ctrl-C: stop the child cleanly
        _stop(child)
        raise
    if child.returncode == 0:
        return
    if child.returncode == MISSING:
        raise MergeUnavailable(err.strip() or "the reading side")
    if child.returncode == USER_ERROR:
        raise UserError(err.strip())
    last = err.strip().splitlines()[-1] if err.strip() else f"exit code {child.returncode}"
    raise RuntimeError(f"merging the rank traces into {out} failed: {last}")


def _stop(child: subprocess.Popen) -> None:
    """SIGINT, so the child's writer removes its temporary file; a kill if it does not end soon."""
    if child.poll() is None:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
