"""The attribution trace beside a trace: the iteration after a lite window, recorded with Python
stacks (capture/hooks.py writes `<folder>/attribution/rank-<r>.pt.trace.json.gz`), loaded with the
trace when the trace has no stacks of its own, so its events get user-code sites without the
window paying for stacks (analysis/host/borrowed_sites.py).

For a rank file, its namesake in attribution/; for a run folder or a merged trace, the folder
attribution/ itself (all ranks). One that cannot be read is a warning on the trace, never an error:
the trace is whole without it.
"""
from __future__ import annotations

from pathlib import Path

from ..capture.trace_files import ATTRIBUTION_DIR
from ..errors import TraceError
from .model import Trace
from ..textsafe import quote_path


def attribution_path(path: Path) -> Path | None:
    """Where the attribution trace of the trace at `path` is; None without one."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    companion = folder / ATTRIBUTION_DIR
    if path.is_file() and (companion / path.name).is_file():
        return companion / path.name
    if companion.is_dir() and any(companion.glob("*.json*")):
        return companion
    return None


def attach_attribution(trace: Trace, path: Path, load) -> Trace:
    """`trace` with its attribution trace loaded (by `load`, the loader's own entry point), when it
    has no Python stacks and one was recorded beside it."""
    if len(trace.frames) or trace.events.empty:
        return trace
    found = attribution_path(path)
    if found is None:
        return trace
    try:
        companion = load(found, progress=False)
    except TraceError as exc:
        trace.warnings.append(f"{quote_path(found)}: the attribution trace is not read ({exc.message}); "
                              "sites are op chains")
        return trace
    if len(companion.frames):
        trace.attribution = companion
    return trace
