"""One trace file loaded: its tables and what it says about its rank, before the files of a trace
are assembled (load.py builds it; file_ranks.py reads its rank evidence)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from .model import Frames, empty_memory


@dataclass
class FileResult:
    """One file loaded: its tables and what it says about its rank (file_ranks.py reads those)."""

    path: Path
    table: pd.DataFrame
    frames: Frames
    rank: int | None                 # from distributedInfo
    merged_ranks: list[int]          # from process names `rank <r>` (merged traces; None: rank)
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0
    base_ns: int | None = None
    warnings: list[str] = field(default_factory=list)
    memory: pd.DataFrame = field(default_factory=empty_memory)
    world_size: int | None = None    # from distributedInfo
    unfit: int = 0                   # of `skipped`: times that do not fit the trace (times.py)
