"""Holistic Trace Analysis (HTA), run on the same files, for `analyze --hta` and as a test oracle.

HTA is optional (`pip install -e '.[hta]'`). It reads the trace files itself; we only hand it a
folder of links to them and collect its temporal and idle-time breakdowns. Its own log lines
(parse times, "add distributedInfo ...") are kept out of the report: HTA logs at INFO to stdout and
prints, so while it runs logging below ERROR is off and its prints are captured; an error it
raises is still one line.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
from pathlib import Path

import pandas as pd

from ..errors import UserError
from ..textsafe import quote_path


class HTAUnavailable(UserError):
    pass


def require_hta():
    """HTA's TraceAnalysis class, or a one-line error saying how to install it."""
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError as exc:
        raise HTAUnavailable("--hta needs Holistic Trace Analysis: pip install -e '.[hta]' "
                             f"(import failed: {exc})") from None
    return TraceAnalysis


def hta_breakdowns(paths: list[Path]) -> dict[str, pd.DataFrame]:
    TraceAnalysis = require_hta()
    with tempfile.TemporaryDirectory(prefix="goodhart-hta-") as folder:
        for i, path in enumerate(paths):
            name = Path(path).name
            if not (name.endswith(".json") or name.endswith(".json.gz")):
                name += ".json"
            os.symlink(Path(path).resolve(), Path(folder) / f"{i}-{name}")
        try:
            with quiet():
                analyzer = TraceAnalysis(trace_dir=folder)
                ranks = sorted(analyzer.t.traces.keys())
                temporal = analyzer.get_temporal_breakdown(visualize=False)
                idle = analyzer.get_idle_time_breakdown(ranks=ranks, visualize=False)
        except Exception as exc:  # HTA is someone else's code: report, don't crash
            raise UserError(f"{quote_path(paths[0])}: HTA failed ({type(exc).__name__}: {exc})") from None
    idle_frame = idle[0] if isinstance(idle, tuple) else idle
    return {"temporal breakdown": temporal, "idle time breakdown": idle_frame}


@contextlib.contextmanager
def quiet():
    """No log record below ERROR and no print reaches the terminal for the body (HTA's chatter)."""
    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(before)
