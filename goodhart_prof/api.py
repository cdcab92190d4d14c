"""One call for notebooks and scripts: `goodhart_prof.analyze("trace.json.gz")`.

Loads a trace file, merged trace or folder of rank traces and runs every analysis, as
`goodhart-prof analyze` does; the result's tables are pandas DataFrames (docs/DESIGN.md defines
each) and `to_json()` is the `--json` document.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

from . import analysis


@dataclasses.dataclass
class Analysis(analysis.Analysis):
    """`analysis.Analysis` (gpu, kernels, categories, host_ops, sync_points, burstiness, phases,
    phases_by_rank, communication, ranks, memory, efficiency, findings, ...) with its JSON document."""

    def to_json(self, top: int | None = None) -> dict[str, Any]:
        """The goodhart-prof/analysis/v1 document `analyze --json` prints (all kernels unless `top`)."""
        from .report.json_report import to_document
        return to_document(self, top)


def analyze(path: str | os.PathLike, rank: int | None = None, device: int | None = None,
            progress: bool | None = False) -> Analysis:
    """Load `path` and analyse it (narrowed to one rank and/or device when given)."""
    from .trace.load import load
    trace = load(path, progress=progress)
    if rank is not None or device is not None:
        trace = trace.select(rank, device)
    result = analysis.analyze(trace)
    return Analysis(**{f.name: getattr(result, f.name) for f in dataclasses.fields(result)})
